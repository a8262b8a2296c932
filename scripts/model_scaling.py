#!/usr/bin/env python3
"""A model of evolve's throughput on one host with G GPUs, from measured per-candidate times.

Each GPU's evaluator judges one candidate at a time, in T_eval seconds (its busy time).  Every
candidate needs a fresh runner process, so a fresh CUDA context; the next runner is started
ahead, so its creation overlaps the current candidate unless creations queue up.  Context creation
takes the driver's host-wide locks: measured (2xH200, README) at 0.19 s alone and 0.35 s each when
two GPUs create at once, i.e. close to fully serialized.  So the host creates at most
1 / c contexts a second (c = the serialized creation time), and while creations hold the locks,
other processes' driver calls wait (measured: validation 0.200 s -> 0.312 s on two GPUs).

    demand(G)  = G / T_eval                      contexts (= candidates) per second
    rho(G)     = demand * c                      share of time the locks are held
    wait(G)    = rho * c / (2 (1 - rho))         M/D/1 queueing delay of one creation
    slowdown   = 1 + s * rho                     driver calls of evaluations wait on the locks
    throughput = G / (T_eval * slowdown)          while wait + c < T_eval (creation stays hidden)
               = 1 / c                           once rho >= 1 (the ceiling)

``s`` is fitted to the two-GPU measurement (it is the part of T_eval spent in driver calls that
wait on a held lock).  The model is a prediction to be checked with
``scripts/bench_scaling.py --gpus 1 2 4 8`` when an eight-GPU host is lent.
"""
from __future__ import annotations

import argparse


def predict(gpus: int, eval_s: float, context_s: float, slowdown_per_rho: float) -> tuple[float, float, bool]:
    """(candidates per second, lock utilisation, creation hidden behind the evaluation): the
    per-GPU cycle is the root of cycle = max(T_eval * (1 + s * rho), c + wait(rho)), with
    rho = G * c / cycle (the right side falls as the cycle grows, so bisection finds it); no
    cycle is shorter than G * c, the serialized creations of G contexts."""
    def right_side(cycle: float) -> float:
        rho = min(gpus * context_s / cycle, 0.999999)
        wait = rho * context_s / (2 * (1 - rho))
        return max(eval_s * (1 + slowdown_per_rho * rho), context_s + wait)

    lo, hi = gpus * context_s, max(eval_s, context_s) * (1 + slowdown_per_rho) + gpus * context_s * 100
    if right_side(lo) <= lo:
        cycle = lo
    else:
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if right_side(mid) > mid else (lo, mid)
        cycle = hi
    rho = gpus * context_s / cycle
    wait = rho * context_s / (2 * (1 - rho)) if rho < 1 else float("inf")
    hidden = eval_s * (1 + slowdown_per_rho * rho) >= context_s + wait
    return gpus / cycle, rho, hidden


def fit_slowdown(eval_s: float, context_s: float, measured_2gpu_speedup: float) -> float:
    """The ``s`` that makes the model give the measured two-GPU speedup (0 if even s = 0 gives less)."""
    def ratio(s: float) -> float:
        return predict(2, eval_s, context_s, s)[0] / predict(1, eval_s, context_s, s)[0]
    lo, hi = 0.0, 20.0
    if ratio(lo) <= measured_2gpu_speedup:
        return 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ratio(mid) > measured_2gpu_speedup else (lo, mid)
    return (lo + hi) / 2


def table(eval_s: float, context_s: float, speedup_2: float, gpus: list[int]) -> list[str]:
    s = fit_slowdown(eval_s, context_s, speedup_2)
    one = predict(1, eval_s, context_s, s)[0]
    rows = [f"T_eval {eval_s:.3g} s, context {context_s:.3g} s, fitted s = {s:.3g} (2 GPUs measured {speedup_2:.3g}x)",
            f"{'GPUs':>5} {'cand/min':>9} {'speedup':>8} {'lock busy':>9}  creation hidden"]
    for g in gpus:
        rate, rho, hidden = predict(g, eval_s, context_s, s)
        rows.append(f"{g:>5} {60 * rate:9.1f} {rate / one:7.2f}x {100 * rho:8.0f}%  {'yes' if hidden else 'NO'}")
    rows.append(f"ceiling: {60 / context_s:.0f} candidates/min (1 / context); saturates near "
                f"{eval_s / context_s:.1f} GPUs without the driver-wait slowdown")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-s", type=float, action="append",
                        help="per-candidate evaluation seconds (default: 1.70 conv2d default set, 0.36 quick set)")
    parser.add_argument("--context-s", type=float, default=0.19, help="one CUDA context creation, alone")
    parser.add_argument("--speedup-2", type=float, action="append",
                        help="measured two-GPU speedup for each --eval-s (default: 1.97, 1.45)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    args = parser.parse_args()
    evals = args.eval_s or [1.70, 0.36]
    speedups = args.speedup_2 or [1.97, 1.45][: len(evals)]
    for eval_s, speedup_2 in zip(evals, speedups):
        print("\n".join(table(eval_s, args.context_s, speedup_2, args.gpus)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
