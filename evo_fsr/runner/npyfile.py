"""Minimal .npy reading and writing for the candidate runner, standard library only.

The runner is started once per candidate and must start fast; importing NumPy would cost it
tens of milliseconds.  It only ever moves flat, C-ordered buffers of the dtypes in
``evaluate.NP_DTYPES``, so the format subset it needs is small: version 1.0 (written) and
1.0-3.0 (read), ``fortran_order`` False.  The trusted side reads and writes these files with
``numpy.save`` / ``numpy.load``.
"""
from __future__ import annotations

import ast
import struct
from pathlib import Path
from typing import IO, Sequence

MAGIC = b"\x93NUMPY"


def descr(np_dtype: str) -> str:
    """The header's ``descr`` of a dtype string such as ``<f4`` or ``i1`` (byte types: ``|i1``)."""
    return np_dtype if np_dtype[:1] in "<>|=" else "|" + np_dtype


def itemsize(np_dtype: str) -> int:
    return int(np_dtype.lstrip("<>|=")[1:])


def write_header(f: IO[bytes], np_dtype: str, shape: Sequence[int]) -> None:
    """A version 1.0 header, padded so that the data starts at a multiple of 64 bytes."""
    dims = ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "")
    text = f"{{'descr': '{descr(np_dtype)}', 'fortran_order': False, 'shape': ({dims}), }}"
    pad = -(len(MAGIC) + 2 + 2 + len(text) + 1) % 64
    header = (text + " " * pad + "\n").encode("latin1")
    f.write(MAGIC + b"\x01\x00" + struct.pack("<H", len(header)) + header)


def read(path: Path, np_dtype: str, nbytes: int) -> bytearray:
    """The data of a .npy file, checked against the dtype and byte count the caller expects."""
    data = bytearray(nbytes)
    read_into(path, np_dtype, memoryview(data))
    return data


def read_into(path: Path, np_dtype: str, data: memoryview) -> None:
    """The data of a .npy file into ``data`` (exactly its size), checked against the dtype."""
    nbytes = data.nbytes
    with open(path, "rb") as f:
        head = f.read(len(MAGIC) + 2)
        if len(head) < len(MAGIC) + 2 or head[:len(MAGIC)] != MAGIC:
            raise ValueError(f"{path.name}: not a .npy file")
        major = head[len(MAGIC)]
        size_format = "<H" if major == 1 else "<I"
        (length,) = struct.unpack(size_format, f.read(struct.calcsize(size_format)))
        header = ast.literal_eval(f.read(length).decode("latin1"))
        if not isinstance(header, dict) or header.get("fortran_order") or header.get("descr") != descr(np_dtype):
            raise ValueError(f"{path.name}: header {header!r}, expected a C-ordered {descr(np_dtype)} array")
        got = f.readinto(data) if nbytes else 0
        if got != nbytes or f.read(1):
            raise ValueError(f"{path.name}: file has a different byte count than the expected {nbytes}")
