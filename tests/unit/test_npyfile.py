"""The runner's standard-library .npy reader and writer against NumPy's own."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evo_fsr.runner import npyfile
from evo_fsr.verdict.evaluate import NP_DTYPES


@pytest.mark.parametrize("np_dtype", sorted(set(NP_DTYPES.values())))
@pytest.mark.parametrize("shape", [(0,), (7,), (3, 5), (2, 3, 4, 5)])
def test_round_trip_with_numpy(tmp_path: Path, np_dtype: str, shape: tuple[int, ...]) -> None:
    array = (np.arange(int(np.prod(shape))) % 97).astype(np_dtype).reshape(shape)
    np.save(tmp_path / "a.npy", array)
    data = npyfile.read(tmp_path / "a.npy", np_dtype, array.nbytes)
    assert bytes(data) == array.tobytes()
    assert npyfile.itemsize(np_dtype) == np.dtype(np_dtype).itemsize
    with open(tmp_path / "b.npy", "wb") as f:
        npyfile.write_header(f, np_dtype, shape)
        f.write(array.tobytes())
    back = np.load(tmp_path / "b.npy")
    assert back.dtype == np.dtype(np_dtype) and back.shape == shape and np.array_equal(back, array)
    header = (tmp_path / "b.npy").read_bytes()[:len(npyfile.MAGIC) + 4]
    assert (len(npyfile.MAGIC) + 4 + int.from_bytes(header[-2:], "little")) % 64 == 0


def test_wrong_dtype_size_or_format_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros(4, "<f4"))
    with pytest.raises(ValueError, match="expected a C-ordered <f8"):
        npyfile.read(tmp_path / "a.npy", "<f8", 32)
    with pytest.raises(ValueError, match="byte count"):
        npyfile.read(tmp_path / "a.npy", "<f4", 12)
    with pytest.raises(ValueError, match="byte count"):
        npyfile.read(tmp_path / "a.npy", "<f4", 20)
    np.save(tmp_path / "f.npy", np.asfortranarray(np.zeros((2, 3), "<f4")))
    with pytest.raises(ValueError, match="C-ordered"):
        npyfile.read(tmp_path / "f.npy", "<f4", 24)
    (tmp_path / "x.npy").write_bytes(b"not numpy at all")
    with pytest.raises(ValueError, match="not a .npy file"):
        npyfile.read(tmp_path / "x.npy", "<f4", 4)
