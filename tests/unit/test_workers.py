"""The Ray pool on a local cluster with declared GPU resources and a synthetic evaluator."""
from __future__ import annotations

import json
import time
from collections import Counter

import pytest

ray = pytest.importorskip("ray")

from evo_fsr.commands.evolve import main  # noqa: E402
from evo_fsr.testing.synthetic import (SyntheticEvaluator, synthetic_compile, synthetic_compile_failure,  # noqa: E402
                               synthetic_speedup)
from evo_fsr.types import Candidate, Status  # noqa: E402
from evo_fsr.backend.ray_pool import GpuPool, WorkerError, connect  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def make_pool(**kw) -> GpuPool:
    options = dict(compile_fn=synthetic_compile, failure_fn=synthetic_compile_failure, hang_timeout_s=60.0)
    options.update(kw)
    return GpuPool(SyntheticEvaluator, **options).start()


def run_all(pool: GpuPool, sources: list[str], limit_s: float = 60.0) -> dict[str, tuple[Candidate, object]]:
    for source in sources:
        pool.submit(Candidate("conv2d", source))
    got: dict[str, tuple[Candidate, object]] = {}
    deadline = time.monotonic() + limit_s
    while len(got) < len(sources) and time.monotonic() < deadline:
        for candidate, result in pool.poll(0.5):
            assert candidate.id not in got, "a candidate came back twice"
            got[candidate.id] = (candidate, result)
    return got


def kernel(i: int) -> str:
    return f"#define T {2 ** (i % 3 + 3)} // knob: 8 16 32\n__global__ void k{i}() {{}}\n"


def test_one_actor_per_gpu_evaluates_everything(cluster) -> None:
    pool = make_pool()
    try:
        assert pool.size == 2 and pool.gpu_info.name.startswith("synthetic") and pool.arch == "sm_90"
        got = run_all(pool, [kernel(i) for i in range(6)])
        assert len(got) == 6
        for candidate, result in got.values():
            assert result.status is Status.OK and result.fitness[1] == pytest.approx(synthetic_speedup(candidate.source))
            assert result.worker.split(":")[1].startswith("gpu") and result.started_unix_s > 0
    finally:
        pool.close()


def test_compile_failure_costs_no_gpu_time(cluster) -> None:
    pool = make_pool()
    try:
        # would kill the GPU worker if it ever reached it
        source = "SYNTHETIC_COMPILE_ERROR SYNTHETIC_EXIT"
        (_, result), = run_all(pool, [source]).values()
        assert result.status is Status.COMPILE_ERROR and "synthetic compile error" in result.log("compile")
        assert pool.replaced_workers == 0
    finally:
        pool.close()


def test_worker_killed_mid_run_loses_no_candidate(cluster, tmp_path) -> None:
    pool = make_pool()
    try:
        sources = [kernel(i) for i in range(4)] + [f"SYNTHETIC_EXIT_ONCE:{tmp_path / 'died'} x"] + \
                  [kernel(i) + "// more" + "\nint z;" for i in range(4, 8)]
        got = run_all(pool, sources)
        assert len(got) == len(sources)
        assert all(result.status is Status.OK for _, result in got.values())
        assert (tmp_path / "died").exists() and pool.replaced_workers == 1 and pool.size == 2
    finally:
        pool.close()


def test_candidate_that_kills_two_workers_is_a_crash(cluster) -> None:
    pool = make_pool()
    try:
        got = run_all(pool, ["SYNTHETIC_EXIT a", kernel(1)])
        results = {c.source: r for c, r in got.values()}
        assert results["SYNTHETIC_EXIT a"].status is Status.CRASH
        assert "lost 2 evaluator workers" in results["SYNTHETIC_EXIT a"].summary
        assert results[kernel(1)].status is Status.OK and pool.replaced_workers == 2
    finally:
        pool.close()


def test_hung_worker_is_replaced_and_the_candidate_timed_out(cluster) -> None:
    pool = make_pool(hang_timeout_s=1.5)
    try:
        got = run_all(pool, ["SYNTHETIC_HANG h", kernel(2)], limit_s=30)
        results = {c.source: r for c, r in got.values()}
        assert results["SYNTHETIC_HANG h"].status is Status.TIMEOUT and "hung" in results["SYNTHETIC_HANG h"].summary
        assert results[kernel(2)].status is Status.OK and pool.replaced_workers == 2
    finally:
        pool.close()


def test_evolve_end_to_end_on_the_ray_pool(cluster, tmp_path, capsys) -> None:
    def backend(config, task):
        return GpuPool(SyntheticEvaluator, compile_fn=synthetic_compile, failure_fn=synthetic_compile_failure).start()
    out = tmp_path / "run"
    code = main(["--task", "conv2d", "--pop", "8", "--gens", "2", "--out", str(out)], backend_factory=backend)
    assert code == 0
    text = capsys.readouterr().out
    assert "gen   2/2" in text and str(out / "best.cu") in text
    assert ray.is_initialized()              # the pool did not shut down a cluster it did not start


def test_evolve_steady_mode_on_the_ray_pool(cluster, tmp_path, capsys) -> None:
    pools: list[GpuPool] = []

    def backend(config, task):
        pools.append(GpuPool(SyntheticEvaluator, compile_fn=synthetic_compile,
                             failure_fn=synthetic_compile_failure).start())
        return pools[-1]
    out = tmp_path / "run"
    code = main(["--task", "conv2d", "--pop", "8", "--gens", "2", "--mode", "steady", "--out", str(out)],
                backend_factory=backend)
    assert code == 0
    captured = capsys.readouterr()
    assert "epoch   2/2" in captured.out and "steady-state with 8 in flight" in captured.err   # 2 GPUs: 4 x 2 + 4, capped at pop 8
    records = [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()]
    per_epoch = Counter(r["generation"] for r in records if r["kind"] == "evaluated")
    assert per_epoch[1] == 8 and 8 <= per_epoch[2] <= 8 + 8     # the last epoch takes up to in_flight more
    assert pools[0].pending() == 0                  # the in-flight drain left nothing behind
    assert ray.is_initialized()


def test_no_gpu_visible_fails_in_one_line(cluster, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    with pytest.raises(WorkerError, match="no GPU visible to Ray"):
        connect()
    code = main(["--task", "conv2d", "--pop", "8", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err[-1].startswith("evolve: no GPU visible to Ray")
    assert not (tmp_path / "run").exists()
