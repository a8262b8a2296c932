"""The trusted flush demotes persisting L2 lines first (l2_flush.reset_persisting_l2), then reads."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from evo_fsr.verdict import l2_flush, memory


def test_the_reset_is_called_and_a_failing_driver_disables_it_with_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def ok() -> int:
        calls.append(0)
        return 0

    monkeypatch.setattr(l2_flush, "_persisting_reset", ok)
    assert l2_flush.reset_persisting_l2() and l2_flush.reset_persisting_l2() and len(calls) == 2
    monkeypatch.setattr(l2_flush, "_persisting_reset", lambda: 201)       # CUDA_ERROR_INVALID_CONTEXT
    assert not l2_flush.reset_persisting_l2()
    assert "not reset" in caplog.text and l2_flush._persisting_reset is False
    assert not l2_flush.reset_persisting_l2()                             # disabled, no second warning
    assert caplog.text.count("not reset") == 1


def test_the_trusted_flush_resets_then_reads_on_the_current_stream_then_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Persisting lines demoted before the read pass (else they would survive it), the pass
    queued on CuPy's current stream (after the inputs' loads), then a wait; and no memset (that
    left the L2 dirty for the timed call to write back).  The library's timing goes through the
    same ``empty_l2``, on torch's stream."""
    order: list[str] = []
    monkeypatch.setattr(l2_flush, "reset_persisting_l2", lambda: order.append("reset") or True)
    monkeypatch.setattr(l2_flush, "shared_flush",
                        lambda: SimpleNamespace(run=lambda stream_ptr=None: order.append(f"read {stream_ptr}")))

    runtime = SimpleNamespace(memsetAsync=lambda ptr, value, size, stream: order.append("fill"))
    cupy = SimpleNamespace(cuda=SimpleNamespace(runtime=runtime, get_current_stream=lambda: SimpleNamespace(ptr=0)))
    fake = memory.CupyMemory.__new__(memory.CupyMemory)
    fake._cupy = cupy
    fake.synchronize = lambda: order.append("sync")             # type: ignore[method-assign]
    fake.flush_l2()
    fake.flush_l2()
    l2_flush.empty_l2(0xABC)
    assert order == ["reset", "read None", "sync"] * 2 + ["reset", f"read {0xABC}"]
