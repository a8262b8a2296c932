"""The Ray pool on a two-node cluster on this machine: a head node and a worker node, each with
one declared GPU; the worker node is killed mid-run."""
from __future__ import annotations

import functools
import logging
import re
import time

import pytest

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from evo_fsr.backend.ray_pool import GpuPool  # noqa: E402
from evo_fsr.testing.synthetic import SyntheticEvaluator, synthetic_compile, synthetic_compile_failure  # noqa: E402
from evo_fsr.types import Candidate, Status  # noqa: E402


@pytest.fixture
def two_nodes():
    if ray.is_initialized():
        ray.shutdown()
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1})
    worker = cluster.add_node(num_cpus=0, num_gpus=1)      # evaluates only: compiles run on the head
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster, worker
    ray.shutdown()
    cluster.shutdown()


def kernel(i: int) -> str:
    return f"#define T {2 ** (i % 3 + 3)} // knob: 8 16 32\n__global__ void node_test{i}() {{}}\n"


def test_killing_a_worker_node_requeues_its_candidate_on_the_surviving_node(two_nodes, caplog) -> None:
    cluster, worker_node = two_nodes
    caplog.set_level(logging.WARNING, logger="evo_fsr")
    pool = GpuPool(functools.partial(SyntheticEvaluator, delay_s=0.5), compile_fn=synthetic_compile,
                   failure_fn=synthetic_compile_failure, hang_timeout_s=60.0).start()
    try:
        assert pool.size == 2
        candidates = [Candidate("conv2d", kernel(i)) for i in range(8)]
        for candidate in candidates:
            pool.submit(candidate)
        got: dict[str, object] = {}
        killed_at = None
        deadline = time.monotonic() + 40
        while len(got) < len(candidates) and time.monotonic() < deadline:
            for candidate, result in pool.poll(0.2):
                assert candidate.id not in got, "a candidate came back twice"
                got[candidate.id] = result
            if killed_at is None and len({r.worker for r in got.values()}) == 2:   # both nodes busy with the next
                cluster.remove_node(worker_node, allow_graceful=False)      # returns once its processes are dead
                killed_at = time.time()
        assert killed_at is not None and len(got) == len(candidates), "a candidate was lost"
        assert all(result.status is Status.OK for result in got.values())
        later = {r.worker for r in got.values() if r.started_unix_s > killed_at}
        assert later                                              # evaluation went on after the kill
        # (a loaded host may also see the surviving node's actor reported unavailable and replaced:
        # both nodes share a host name, so worker ids cannot tell the nodes apart)
        lost = [re.search(r"on candidate (\S+);", r.getMessage()) for r in caplog.records
                if "evaluator worker died" in r.getMessage()]
        assert lost and all(m is not None for m in lost) and pool.replaced_workers == len(lost)
        for match in lost:                                        # each lost candidate ran again, later
            requeued = got[match.group(1)]
            assert requeued.worker in later and requeued.started_unix_s > killed_at
        assert pool.pending() == 0
    finally:
        pool.close()
