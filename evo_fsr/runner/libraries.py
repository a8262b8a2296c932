"""Which vendor libraries a runner has mapped, read from outside the runner (/proc/<pid>/maps).

Users ask evo-fsr for a kernel, not for a call into cuBLAS: a candidate that loads a vendor
library (cuBLAS, cuDNN, cuFFT, ..., or torch's bundled copies) is rejected unless the user opts
in, and the verdict then lists what it loaded.  The trusted side reads the maps itself; a runner
whose maps cannot be read (it made itself non-dumpable, say) is a sandbox violation.
"""
from __future__ import annotations

import os
import re

VENDOR = re.compile(r"^lib(cublas|cublasLt|cudnn\w*|cufft\w*|curand|cusparse\w*|cusolver\w*|nccl|nvrtc\w*|"
                    r"nvJitLink|cupti|npp\w*|nvjpeg|cutensor\w*|cudss|torch\w*|c10\w*|caffe2\w*|mkl\w*|"
                    r"openblas\w*|cufile\w*|nvblas)[.\-_]")


def mapped_files(pid: int) -> list[str]:
    """Paths of the files mapped into process ``pid``; OSError when they cannot be read."""
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
        text = f.read()
    paths = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            paths.append(parts[5].removesuffix(" (deleted)"))
    return sorted(set(paths))


def is_vendor_library(path: str) -> bool:
    name = os.path.basename(path)
    return bool(VENDOR.match(name)) or "/site-packages/nvidia/" in path or "/torch/lib/" in path


def vendor_libraries_of(pid: int) -> tuple[list[str], str]:
    """(vendor libraries mapped into ``pid``, a problem reading them or "")."""
    try:
        paths = mapped_files(pid)
    except FileNotFoundError:
        return [], ""                      # it has exited: its verdict says how
    except OSError as exc:
        return [], f"the runner's memory map could not be read ({exc.strerror}): it hid what it loaded"
    if not paths:
        return [], "the runner's memory map is empty: it hid what it loaded"
    return [os.path.basename(p) for p in paths if is_vendor_library(p)], ""
