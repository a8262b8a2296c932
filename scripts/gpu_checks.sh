#!/usr/bin/env bash
# What we run on a GPU host, one step per device call (each ends well inside 10 minutes), in the
# order a session with ~30 minutes of device time should take them. Logs go to $OUT (the device
# tool's folder) or ./gpu-logs.
#
#   scripts/gpu_checks.sh tests        # pytest -m gpu: evaluator, families, distributions, fused checks, export, LLM
#   scripts/gpu_checks.sh sweep 1      # every seed through the benchmark sweep, half of the tasks (alone: it
#   scripts/gpu_checks.sh sweep 2      #   holds every shape's buffers; ~9 min for all 21 tasks on an H100)
#   scripts/gpu_checks.sh adversarial  # suites v3, v4, batch fusion, v2 (verdict table printed) and v1 (~12 min:
#                                      #   cut by the 600 s limit, run v1 and v2 in a second call)
#   scripts/gpu_checks.sh idle         # the idle gate's probe beside other processes' kernels and
#                                      # copies (probe_gpu_idle.py: gpu_idle.py's thresholds, ~1.5 min)
#   scripts/gpu_checks.sh launch_bound # topk's launch-bound shape: forgers against the honest seed at
#                                      # launch_bound_factor 1 and 8 (probe_slack.py), and where the
#                                      # window's spread comes from (probe_window_parts.py; ~3 min)
#   scripts/gpu_checks.sh round_trip   # the parts of a launch-bound window's round trip on one clock,
#                                      # per wake-up variant (probe_round_trip.py; ~2.5 min)
#   [FAST=1] scripts/gpu_checks.sh twin_length  # topk's honest seed and three forgers judged one call a
#                                      # window and in chained windows (verdict/chain.py; FAST=1: also a
#                                      # twin as fast as the candidate; probe_twin_length.py)
#   EVO_FSR_CHAIN_WINDOWS=0 scripts/gpu_checks.sh adversarial   # the suites with one call a launch-bound window
#   [TASKS="topk sort" ROUNDS=1] scripts/gpu_checks.sh chain   # every seed of the launch-bound tasks judged
#                                      # one call a window and chained (verdict/chain.py; probe_chain.py)
#   [REPS=3] scripts/gpu_checks.sh chain_first  # topk's 75 % forger judged first by fresh chained
#                                      # evaluators, the pool taken by the chain twin and by the naive
#                                      # seed's (probe_chain_first.py), then suite v3 (~5 min)
#   scripts/gpu_checks.sh chain_links  # what a chained window's links cost beside the seed's calls:
#                                      # the room of a forger that replaces them (probe_chain_links.py, ~1 min)
#   scripts/gpu_checks.sh flush        # what each L2 flush leaves behind (probe_flush.py), and a
#                                      # 1 us forger against its honest twin per flush (probe_forger.py)
#   [TASKS="a b" TRIALS=30 LIMIT_S=500] scripts/gpu_checks.sh library   # families against the library,
#                                                          # interleaved, one process (% SOL, % of copy)
#   scripts/gpu_checks.sh cost         # conv2d cost per candidate, ResNet-50 set: old protocol vs this one
#   scripts/gpu_checks.sh resume       # SIGKILL a real run mid-generation, then --resume (issue 15)
#   TASKS="a b" REPEAT=5 scripts/gpu_checks.sh seeds   # every seed of the tasks on fresh input draws
#   TASK=t VARIANTS="seed:s seed:s@K=V,K=V" scripts/gpu_checks.sh variants   # knob variants judged in
#                                                          # one evaluate.py process (--trials 30)
#   [TASK=t SEED=s REPS=8 FRESH_POOL=1] scripts/gpu_checks.sh charges  # an honest seed judged REPS times: which
#                                                          # term set each credit, and the parts of its windows
#                                                          # (probe_charges.py); FRESH_POOL=1: a shape charged twice
#                                                          # is judged against a fresh pool (fresh_pool_retime)
#   EVO_FSR_FRESH_POOL_RETIME=1 scripts/gpu_checks.sh adversarial   # the suites with the fresh pool on
#   EVO_FSR_PIN_RUNNERS=0 scripts/gpu_checks.sh adversarial   # the suites with the runners unpinned (the
#                                                          # default pins each to one core, runner/cores.py)
#   [SPECS="task:seed v4:case" REPS=4] scripts/gpu_checks.sh pinning  # honest kernels judged pinned and
#                                                          # unpinned, alternating in one process: what
#                                                          # pinning costs them (probe_pinning.py, ~5 min)
#   [CASES="a b" REPS=12] scripts/gpu_checks.sh rounds  # v3/v4 cases of one task and their honest twin in
#                                                          # fresh evaluators, every timing round recorded
#                                                          # (probe_rounds.py: pool drift; rounds.json to replay)
#   [CASES="a b" REPS=2] scripts/gpu_checks.sh stamps  # every step of a batched window on the clock both
#                                                          # processes share, per role (probe_window_stamps.py)
#   [SETUPS=default,stack:256] scripts/gpu_checks.sh switch  # what a kernel waits when another process
#                                                          # used the GPU last: a window's two context
#                                                          # changes (probe_context_switch.py, ~10 s)
#   TASK=t VARIANTS="..." [BATCH=1,8] scripts/gpu_checks.sh inproc  # the same variants and the library timed alike in one
#                                                          # process: no runner, no IPC, no window (probe_inproc.py)
#   TASKS="a b" BUDGET_S=560 scripts/gpu_checks.sh evolve  # issue 13: a no-LLM evolve run per task
#                                                          # (pop 16, 5 generations), one after another;
#                                                          # RESUME=1: resume a run cut by an earlier call
#                                                          # on the same (still warm) machine
#
# Lessons of the 2026-11-23 H100 session: a fault in one pytest process makes its CUDA context
# unusable, so groups run in separate processes; two GPU processes at once perturb the
# adversarial suite's timing comparisons, so it runs alone; a fresh machine spends ~30 s on the
# first evaluation (CuPy kernel cache, torch import), so benchmarks warm up first.
set -uo pipefail
out=${OUT:-gpu-logs}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
P="python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --durations=8"
step() { echo; echo "=== $* ($(date +%T))"; }
nvidia-smi -L
case "${1:-tests}" in
tests)
    # nine groups at once (correctness only; one after another they pass the 600 s a device call
    # may run; the family-B tests, mostly nvcc, took 393 s and 522 s as two groups on an H100 in
    # the seventeenth session, so they ran as four; the single-call windows of the twenty-first
    # brought the slowest of those to 517 s, so they run as six); a fault in one group leaves the
    # others' CUDA contexts alone
    step "evaluator, edges, families, distributions, fused checks, export, LLM (9 groups in parallel)"
    # nine evaluators share the GPU on purpose: the idle gate before each window (gpu_idle.py)
    # would wait on the other groups' work, so it is off for the groups (on for the rerun alone)
    # (and with it the runners' pinning: one core for the runners of all nine, runner/cores.py)
    export EVO_FSR_GPU_SHARED=1
    timeout 540 $P tests/gpu/test_evaluator_gpu.py tests/gpu/test_edges_gpu.py > "$out/t_eval.log" 2>&1 &
    timeout 540 $P -s tests/gpu/test_families_a_gpu.py tests/gpu/test_export_gpu.py tests/gpu/test_base_sets_gpu.py \
        > "$out/t_families_a.log" 2>&1 &
    for third in 1 2 3; do
        FAMILY_SHARD=$third/3 timeout 540 $P tests/gpu/test_families_b_gpu.py -k validates > "$out/t_families_b_v$third.log" 2>&1 &
        FAMILY_SHARD=$third/3 timeout 540 $P tests/gpu/test_families_b_gpu.py -k aligned > "$out/t_families_b_a$third.log" 2>&1 &
    done
    timeout 540 $P -s tests/gpu/test_distributions_gpu.py tests/gpu/test_fused_checks_gpu.py tests/gpu/test_llm_gpu.py \
        > "$out/t_dist_llm.log" 2>&1 &
    # the GPU's memory in use every 5 s: nine groups at once ran an H200 out of memory once
    # (twenty-second session: six tests failed to create a CUDA context)
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader -l 5 > "$out/memory.csv" 2>/dev/null &
    smi=$!
    # and how many processes hold a CUDA context (each costs GPU memory of its own; the
    # thirty-eighth session saw 43 context failures at a lower peak of memory than 13 had; the
    # forty-third found the cause: test files that kept every evaluator's runners open, 106
    # contexts at the end; with them closed, 35 and no failure)
    while :; do nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | wc -l; sleep 2; done \
        > "$out/contexts.csv" &
    ctx=$!
    # and the host's: in the twenty-third session five tests failed in cudaSetDevice with out of
    # memory while the GPU's memory peaked at 56 of 143 GB
    while :; do free -m | awk '/^Mem:/ {print $3 " MiB, " $2 " MiB"}'; sleep 5; done > "$out/host_memory.csv" 2>/dev/null &
    host=$!
    wait $(jobs -p | grep -vE "^($smi|$host|$ctx)\$")
    kill "$smi" "$host" "$ctx" 2>/dev/null
    echo "processes with a CUDA context at most: $(sort -n "$out/contexts.csv" | tail -n 1)"
    echo "GPU memory used at most: $(sort -n "$out/memory.csv" | tail -n 1)"
    echo "host memory used at most: $(sort -n "$out/host_memory.csv" | tail -n 1)"
    for log in "$out"/t_*.log; do echo "-- $(basename "$log")"; grep -E "^(FAILED|ERROR)" "$log" | head -n 5; tail -n 1 "$log"; done
    grep -A1 "llm_diff outcomes" "$out/t_dist_llm.log"
    # a test that failed beside eight other groups (out of GPU memory, or a time-out) is run
    # again alone; both results are printed, and only the rerun's passes count as passes
    failed=$(grep -hoE "^(FAILED|ERROR) tests/[^ ]+" "$out"/t_*.log | cut -d' ' -f2 | sort -u)
    if [ -n "$failed" ]; then
        step "the $(echo "$failed" | wc -l) failed tests again, alone"
        unset EVO_FSR_GPU_SHARED
        # shellcheck disable=SC2086  # a list of test ids
        timeout "${RERUN_S:-240}" $P $failed > "$out/rerun.log" 2>&1
        grep -E "^(FAILED|ERROR)" "$out/rerun.log" | head -n 10; tail -n 1 "$out/rerun.log"
    fi
    ;;
sweep)
    # every seed of every task through the benchmark sweep; alone, as next to the groups above it
    # ran the GPU out of memory (every benchmark shape's buffers, one input set per distribution)
    half=${2:-1}
    step "every seed through the benchmark sweep, tasks $half/2"
    SWEEP_SHARD=$half/2 timeout 560 $P tests/gpu/test_sweep_gpu.py > "$out/sweep_$half.log" 2>&1
    grep -E "^(FAILED|ERROR)" "$out/sweep_$half.log" | head -n 20; tail -n 1 "$out/sweep_$half.log"
    ;;
adversarial)
    # v3 and batch fusion first (the newest cases: a call cut by the device's 600 s limit keeps them)
    step "suite v3"; timeout 170 $P -s -rxX tests/adversarial/test_adversarial_v3_gpu.py > "$out/adv3.log" 2>&1
    grep -A14 "v3 verdicts:" "$out/adv3.log" | cut -c1-130; tail -n 1 "$out/adv3.log"
    step "suite v4"; timeout 290 $P -s -rxX tests/adversarial/test_adversarial_v4_gpu.py > "$out/adv4.log" 2>&1
    grep -A26 "v4 verdicts:" "$out/adv4.log" | cut -c1-130; tail -n 1 "$out/adv4.log"
    step "calls fused across a batch: a launch-bound shape (timed singly) and the open residual (xfail)"
    timeout 120 $P -s -rxX tests/adversarial/test_batch_fusion_gpu.py > "$out/fusion.log" 2>&1
    grep -E "batch fusion|passed|failed|xfail|XPASS" "$out/fusion.log" | tail -n 5
    step "suite v2"; timeout 420 $P -s tests/adversarial/test_adversarial_v2_gpu.py > "$out/adv2.log" 2>&1
    grep -A70 "verdicts:" "$out/adv2.log" | grep -v "^\.\|^$" | head -n 70; tail -n 4 "$out/adv2.log"
    step "suite v1"; timeout 240 $P tests/adversarial/test_adversarial_gpu.py > "$out/adv1.log" 2>&1; tail -n 6 "$out/adv1.log"
    ;;
idle)
    step "a tiny kernel's latency and a 1 ms window beside other processes' work"
    timeout 240 python3 scripts/probe_gpu_idle.py 2>&1 | tee "$out/probe_gpu_idle.log" | tail -n 12
    ;;
launch_bound)
    step "forgers on a launch-bound shape, at launch_bound_factor 1 and 8"
    timeout 200 python3 scripts/probe_slack.py "${ROUNDS:-3}" 2>&1 | grep -v Warning | tee "$out/probe_slack.log" | tail -n 30
    step "the parts of a launch-bound window"
    timeout 150 python3 scripts/probe_window_parts.py 2>&1 | grep -v Warning | tee "$out/probe_window_parts.log" | tail -n 30
    ;;
round_trip)
    step "the round trip of a launch-bound window, part by part, per wake-up variant"
    timeout 400 python3 scripts/probe_round_trip.py "${ROUNDS:-2}" 2>&1 | grep -v Warning | tee "$out/probe_round_trip.log" | tail -n 80
    ;;
chain_first)
    step "the 75 % forger judged first: pool of the chain twin"
    timeout 170 python3 scripts/probe_chain_first.py "${REPS:-3}" 2>&1 | grep -v Warning | tee "$out/chain_first_fast.log" | grep "^rep\|pool n="
    step "the same, pool of the naive seed's twin"
    EVO_FSR_CHAIN_TWIN=naive timeout 170 python3 scripts/probe_chain_first.py "${REPS:-3}" 2>&1 | grep -v Warning \
        | tee "$out/chain_first_naive.log" | grep "^rep\|pool n="
    step "suite v3"; timeout 170 $P -s -rxX tests/adversarial/test_adversarial_v3_gpu.py > "$out/adv3.log" 2>&1
    grep -A14 "v3 verdicts:" "$out/adv3.log" | cut -c1-130; tail -n 1 "$out/adv3.log"
    ;;
chain_links)
    step "the links of a chained window against the calls they join (topk, sort)"
    timeout 200 python3 scripts/probe_chain_links.py ${TASKS:-topk sort} --trials "${TRIALS:-20}" 2>&1 | grep -v Warning \
        | tee "$out/probe_chain_links.log" | tail -n 20
    ;;
twin_length)
    step "one call a window against chained windows: overheads, forgers"
    timeout 500 python3 scripts/probe_twin_length.py "${ROUNDS:-2}" ${FAST:+--fast} 2>&1 | grep -v Warning | tee "$out/probe_twin_length.log" | tail -n 80
    ;;
chain)
    step "the seeds of the launch-bound tasks, one call a window against chained windows"
    timeout 400 python3 scripts/probe_chain.py ${TASKS:-topk sort} --rounds "${ROUNDS:-1}" 2>&1 | grep -v Warning | tee "$out/probe_chain.log" | tail -n 60
    ;;
flush)
    step "L2 flushes: eviction, write-back, own cost"
    timeout 120 python3 scripts/probe_flush.py --reps "${REPS:-30}" 2>&1 | tee "$out/probe_flush.log" | tail -n 8
    step "a 1 us forger and the naive seed, fresh evaluators, per flush"
    timeout 300 python3 scripts/probe_forger.py --rounds "${ROUNDS:-5}" 2>&1 | grep -v Warning > "$out/forger.log"
    grep -E "^round|median|^  " "$out/forger.log" | cut -c1-90
    ;;
library)
    step "warm-up"; timeout 60 python3 scripts/evaluate.py --task relu seed:naive > /dev/null 2>&1
    step "families vs library"
    timeout ${LIMIT_S:-500} python3 scripts/bench_vs_library.py --tasks ${TASKS:-conv2d matmul attention softmax layernorm \
        histogram prefix_sum cross_entropy} --trials ${TRIALS:-30} --markdown "$out/vs_library.md" 2>&1 | tee "$out/vs_library.log" | tail -n 80
    ;;
cost)
    # before/after on the same kernels, one process per version, alternating (issue 11); the
    # older checkout lies in .bench/before (git archive 062ac66 | tar -x -C .bench/before; carry it)
    step "conv2d cost per candidate, ResNet-50 set, one GPU: protocol v1 (062ac66) against this checkout"
    timeout 560 python3 scripts/bench_cost.py --old .bench/before --task conv2d --variants ${VARIANTS:-5} \
        --rounds ${ROUNDS:-2} --timeout-s 240 --out "$out/cost" 2>&1 | tee "$out/cost.log" | tail -n 20
    ;;
resume)
    step "kill a real run mid-generation, then resume"
    run=/tmp/evo_resume
    rm -rf "$run"
    python3 scripts/evolve.py --task relu --pop 16 --gens 4 --shapes quick --set ray.num_gpus=1 --out "$run" > "$out/resume_1.log" 2>&1 &
    driver=$!
    for _ in $(seq 1 120); do sleep 1; [ "$(wc -l < "$run/candidates.jsonl" 2>/dev/null || echo 0)" -ge 20 ] && break; done
    kill -9 "$driver"; sleep 2; ray stop --force > /dev/null 2>&1
    timeout 300 python3 scripts/evolve.py --resume "$run" > "$out/resume_2.log" 2>&1; echo "resume exit $?"
    python3 - "$run" <<'EOF'
import json, sys
from collections import Counter
records = [json.loads(line) for line in open(f"{sys.argv[1]}/candidates.jsonl") if line.strip()]
evaluated = [r for r in records if r.get("kind") == "evaluated"]
ids = Counter(r.get("id") or r.get("candidate", {}).get("id") for r in evaluated)
print(f"records {len(records)}, evaluated {len(evaluated)}, distinct ids {len(ids)}, "
      f"duplicated ids {sum(1 for n in ids.values() if n > 1)}")
EOF
    cp "$run/candidates.jsonl" "$out/resume_candidates.jsonl" 2>/dev/null
    ;;
seeds)
    # every seed of TASKS on REPEAT fresh secret input draws (a rare-draw false reject shows here)
    step "seeds of ${TASKS:-cross_entropy} x ${REPEAT:-5}"
    timeout 200 python3 - <<'EOF' 2>&1 | tee "$out/seeds.log" | tail -n 30
import os
from evo_fsr.tasks import get_task
from evo_fsr.types import Candidate, Status
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator
bad = 0
for name in os.environ.get("TASKS", "cross_entropy").split():
    task = get_task(name)
    ev = Evaluator(task, EvalConfig(profile=False, validation_seeds=2))
    for rep in range(int(os.environ.get("REPEAT", "5"))):
        for seed, source in task.seeds().items():
            r = ev.evaluate(Candidate(task=name, source=source, label=seed))
            bad += r.status is not Status.OK
            print(f"{name}/{seed} draw {rep}: {r.status.value} {'' if r.status is Status.OK else r.summary}")
print(f"not ok: {bad}")
EOF
    ;;
variants)
    # knob variants of one task in one evaluator: x over naive and x of library, interleaved
    step "warm-up"; timeout 60 python3 scripts/evaluate.py --task relu seed:naive > /dev/null 2>&1
    step "${TASK:?TASK=name is required}: ${VARIANTS:?VARIANTS=\"seed:NAME@KNOB=VALUE,... ...\" is required}"
    # shellcheck disable=SC2086  # VARIANTS is a list of specs
    timeout "${LIMIT_S:-500}" python3 scripts/evaluate.py --task "$TASK" --trials "${TRIALS:-30}" $VARIANTS \
        > "$out/variants_$TASK.log" 2>&1
    echo "exit $?"
    grep -vE "^\s*$|evaluation wall|^  shape" "$out/variants_$TASK.log" | tail -n 80
    ;;
charges)
    # an honest seed judged REPS times in one evaluator: which term set each shape's credit, and
    # where a charged round's windows spent their extra time (probe_charges.py)
    step "${TASK:-dot_product} seed:${SEED:-persistent}, ${REPS:-8} evaluations: credits and window parts"
    timeout "${LIMIT_S:-200}" python3 scripts/probe_charges.py --task "${TASK:-dot_product}" --seed "${SEED:-persistent}" \
        --reps "${REPS:-8}" --trials "${TRIALS:-20}" --out "$out" ${FRESH_POOL:+--fresh-pool} 2>&1 | grep -v Warning \
        | tee "$out/charges.log" | tail -n 60
    ;;
pinning)
    # honest kernels judged by a pinned and an unpinned evaluator in one process, alternating:
    # what pinning the runners (runner/cores.py, the default) costs them (probe_pinning.py)
    step "pinned against unpinned runners, ${REPS:-4} judgements each way"
    # shellcheck disable=SC2086  # a list of specs
    timeout "${LIMIT_S:-540}" python3 scripts/probe_pinning.py --reps "${REPS:-4}" ${SPECS:-} 2>&1 | grep -v Warning \
        | tee "$out/pinning.log" | tail -n 70
    ;;
rounds)
    # the suites' settings, a fresh evaluator a rep: the pool's overhead against the rounds' (probe_rounds.py)
    step "adversarial cases judged in fresh evaluators, every round recorded"
    # shellcheck disable=SC2086  # a list of case names
    timeout "${LIMIT_S:-370}" python3 scripts/probe_rounds.py --cases ${CASES:-replies_before_its_calls_are_done \
        forges_only_in_the_first_round keeps_the_host_awake_through_its_windows} --reps "${REPS:-12}" \
        --limit-s "$(( ${LIMIT_S:-370} - 80 ))" --out "$out" 2>&1 | grep -v Warning | tee "$out/rounds.log" | tail -n 150
    ;;
stamps)
    # where a batched window's ~1 ms of overhead goes: loads, command, runner, mark, copy-out
    step "every step of a window stamped, per role"
    # shellcheck disable=SC2086  # a list of case names
    timeout "${LIMIT_S:-300}" python3 scripts/probe_window_stamps.py --cases ${CASES:-replies_before_its_calls_are_done} \
        --reps "${REPS:-2}" --limit-s "$(( ${LIMIT_S:-300} - 80 ))" --out "$out" 2>&1 | grep -v Warning \
        | tee "$out/stamps.log" | tail -n 80
    ;;
switch)
    # ~140 us each way on an H200 (forty-third session), the same whatever the runner's context holds
    step "a kernel after another process's, per gap and per setup of the second process's context"
    timeout "${LIMIT_S:-120}" python3 scripts/probe_context_switch.py --reps "${REPS:-200}" \
        --setups "${SETUPS:-default,stack:256,stack:65536,alloc:40,streams:16}" 2>&1 | tee "$out/switch.log"
    ;;
inproc)
    # a diagnostic beside `variants`: how much of a gap to the library is the kernel, how much the verdict's timing
    step "${TASK:?TASK=name is required} in-process: ${VARIANTS:?VARIANTS=\"seed:NAME@KNOB=VALUE,... ...\" is required}"
    # shellcheck disable=SC2086  # VARIANTS is a list of specs
    timeout "${LIMIT_S:-200}" python3 scripts/probe_inproc.py --task "$TASK" --trials "${TRIALS:-60}" --batch ${BATCH:-1} $VARIANTS \
        2>&1 | tee "$out/inproc_$TASK.log" | grep -v "max |kernel"
    ;;
evolve)
    # one task after another, each started only with at least MIN_S seconds of BUDGET_S left; a run
    # cut by the budget stops as on Ctrl-C (SIGTERM: summary printed, resumable), and says so
    deadline=$((SECONDS + ${BUDGET_S:-560}))
    for t in ${TASKS:?TASKS=\"task ...\" is required}; do
        left=$((deadline - SECONDS))
        if [ "$left" -lt "${MIN_S:-150}" ]; then echo "skipped $t: $left s of the budget left"; continue; fi
        if [ "${RESUME:-0}" = 1 ] && [ -f "/tmp/evolve_$t/candidates.jsonl" ]; then
            # a run cut by an earlier call on this machine (its run directory is still here)
            step "evolve $t: resumed ($left s left)"
            timeout "$left" python3 scripts/evolve.py --resume "/tmp/evolve_$t" > "$out/evolve_$t.log" 2>&1
        else
            step "evolve $t: pop 16, 5 generations, no LLM ($left s left)"
            rm -rf "/tmp/evolve_$t"
            timeout "$left" python3 scripts/evolve.py --task "$t" --pop 16 --gens 5 --set ray.num_gpus=1 \
                --out "/tmp/evolve_$t" > "$out/evolve_$t.log" 2>&1
        fi
        echo "exit $? after $((SECONDS - deadline + ${BUDGET_S:-560} )) s of the budget"
        grep -E "^(gen|ended|verdicts)" "$out/evolve_$t.log" | tail -n 8
        grep -A4 "^ *rank" "$out/evolve_$t.log" | head -n 5
        cp "/tmp/evolve_$t/best.cu" "$out/best_$t.cu" 2>/dev/null
    done
    ;;
*) echo "unknown step ${1}: see the list at the top of scripts/gpu_checks.sh"; exit 2 ;;
esac
