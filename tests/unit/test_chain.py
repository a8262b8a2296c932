"""Chained windows (verdict/chain.py): the trusted side's reproduction of the chain library's hash
and draw must match the library bit for bit, or every honest chained call is WRONG; the hash must
depend on every output word, or a kernel could hand over a partial output first."""
from __future__ import annotations

import ctypes
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from evo_fsr.tasks import get_task
from evo_fsr.verdict import chain, compile as nvcc


@pytest.fixture(scope="module")
def host_chain():
    """The fake device's chain library (host C), loaded here."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed for the host chain library")
    from evo_fsr.testing.fake_device import compile_host

    built = compile_host(chain.chain_source(get_task("relu"), fake=True))
    assert built.ok, built.log
    folder = Path(tempfile.mkdtemp(prefix="chain-test-"))
    (folder / "chain.so").write_bytes(built.binary)
    lib = ctypes.CDLL(str(folder / "chain.so"))
    yield lib
    shutil.rmtree(folder, ignore_errors=True)


def _pointers(arrays):
    return ((ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays]),
            (ctypes.c_longlong * len(arrays))(*[a.nbytes for a in arrays]), ctypes.c_int(len(arrays)))


STREAM = ctypes.c_void_p(0)


def test_the_library_and_the_trusted_reproduction_agree(host_chain):
    rng = np.random.default_rng(5)
    values = rng.standard_normal(513).astype(np.float32)
    indices = rng.integers(0, 1 << 30, 513).astype(np.int32)
    x, z = np.full(4097, np.nan, np.float32), np.full(7, np.nan, np.float32)
    assert host_chain.evo_fsr_chain_link(*_pointers([values, indices]), *_pointers([x, z]), ctypes.c_int(0), STREAM) == 0
    h = chain.output_hash(np, [values, indices])
    want_x, want_z = chain.inputs_from_hash(np, h, [x.size, z.size])
    assert want_x.dtype == np.float32 and np.array_equal(want_x.view(np.uint32), x.view(np.uint32))
    assert np.array_equal(want_z.view(np.uint32), z.view(np.uint32))
    # uniform in [-1, 1), finite, no -0.0, and not all alike
    assert np.isfinite(x).all() and x.min() >= -1.0 and x.max() < 1.0 and not np.signbit(x[x == 0]).any()
    assert len(np.unique(x)) > 4000 and abs(float(x.mean())) < 0.1


def test_the_first_call_is_drawn_from_the_seed_the_gate_saw(host_chain):
    """Call 0's inputs come from the word the trusted side writes as the window opens (the gate's
    seed), not from the last hash: a window's chain must not start before that word exists."""
    word = np.zeros(1, np.uint64)
    word[0] = 0x1234_5678_9ABC_DEF1
    assert host_chain.evo_fsr_chain_gate(ctypes.c_void_p(word.ctypes.data), STREAM) == 0
    values = np.arange(64, dtype=np.float32)
    x = np.full(1000, np.nan, np.float32)
    # outputs passed as well: a link from the seed ignores them
    assert host_chain.evo_fsr_chain_link(*_pointers([values]), *_pointers([x]), ctypes.c_int(1), STREAM) == 0
    template = {"x": np.zeros(1000, np.float32)}
    want = chain.drawn_inputs(get_task("topk"), int(word[0]), template, np)["x"]
    assert np.array_equal(want.view(np.uint32), x.view(np.uint32))
    other = chain.drawn_inputs(get_task("topk"), int(word[0]) ^ 2, template, np)["x"]
    assert not np.array_equal(other, x)
    y = np.full(1000, np.nan, np.float32)                           # not from the seed: from the hash
    assert host_chain.evo_fsr_chain_link(*_pointers([values]), *_pointers([y]), ctypes.c_int(0), STREAM) == 0
    assert np.array_equal(chain.inputs_from_hash(np, chain.output_hash(np, [values]), [1000])[0], y)


def test_the_cuda_library_has_the_gate_and_no_pace():
    """The CUDA chain: the gate spins on the shared word with a bound, the draw has no pace, and a
    link is one kernel (cooperative where its blocks share the hash, plain where each hashes the
    outputs whole): a forger that fuses the links into its own kernels saves about one launch."""
    source = chain.chain_source(get_task("topk"))
    assert "evo_fsr_chain_gate" in source and "globaltimer" in source and "EVO_FSR_PACE" not in source
    link = source[source.index('extern "C" int evo_fsr_chain_link('):]
    assert link.count("cudaLaunchCooperativeKernel(") == 1 and link.count("<<<") == 1
    assert link.index("cudaLaunchCooperativeKernel(") < link.index("} else {") < link.index("<<<")
    assert f"{int(chain.GATE_TIMEOUT_S * 1e9)}LL" in source


def test_every_output_word_and_its_place_move_the_hash():
    rng = np.random.default_rng(7)
    values = rng.standard_normal(300).astype(np.float32)
    indices = np.arange(300, dtype=np.int32)
    h = chain.output_hash(np, [values, indices])
    for b, where in ((0, 0), (0, 299), (1, 150)):
        changed = [values.copy(), indices.copy()]
        changed[b].view(np.uint32)[where] ^= 1                      # one bit of one word
        assert chain.output_hash(np, changed) != h
    swapped = values.copy()
    swapped[[3, 4]] = swapped[[4, 3]]                               # the same words, two places swapped
    assert chain.output_hash(np, [swapped, indices]) != h
    assert chain.output_hash(np, [indices.view(np.float32), values.view(np.int32)]) != h   # buffers swapped


def test_the_draws_are_not_a_24_bit_grid():
    """Draws of 53 random bits rounded once to float: values under 0.5 in magnitude keep bits below
    2**-23 (a grid of 2**-23, the draws until the thirty-fifth session, lets a sort of the draws use
    24-bit keys), and the sort keys spread over many exponents."""
    x = chain.inputs_from_hash(np, 0x0123_4567_89AB_CDEF, [1 << 16])[0]
    off_grid = np.mean(x * np.float32(1 << 23) != np.round(x * np.float32(1 << 23)))
    assert off_grid > 0.4, f"only {off_grid:.1%} of the draws are off the 2**-23 grid"
    exponents = np.unique((x.view(np.uint32) >> 23) & 0xFF)
    assert len(exponents) >= 12, exponents
    assert x.min() >= -1.0 and x.max() < 1.0 and abs(float(x.mean())) < 0.02


def test_expected_inputs_keep_the_template_shape_and_other_keys():
    task = get_task("topk")
    template = {"x": np.zeros(1000, np.float32)}
    taken = {"values": np.ones(5, np.float32), "indices": np.arange(5, dtype=np.int32),
             "after:x": np.zeros(1000, np.float32)}
    made = chain.chained_inputs(task, template, [taken, taken], np)
    assert made[0] is template and made[1]["x"].shape == (1000,)
    assert not np.array_equal(made[1]["x"], template["x"])


def test_which_tasks_chain():
    assert chain.eligible(get_task("topk")) and chain.eligible(get_task("sort"))
    assert not chain.eligible(get_task("histogram"))          # integer inputs: uniform floats are not valid


@pytest.mark.skipif(nvcc.nvcc_path() is None, reason="nvcc not found")
def test_the_cuda_library_compiles():
    built = nvcc.compile_source(chain.chain_source(get_task("topk")), get_task("topk").header(), "sm_90", cache_dir=None)
    assert built.ok, built.log
