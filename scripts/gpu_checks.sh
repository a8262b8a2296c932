#!/usr/bin/env bash
# What we run on a GPU host to produce the figures quoted in README.md, tasks/README.md and
# the issue notes.  Logs go to $1 (default ./gpu-logs).  Steps: the GPU test suite, the
# seed benchmark table, the sandbox cost, a knob-only evolve run, best.cu re-evaluated, and
# an evolve run whose LLM operators talk to a local server of prepared replies.
set -uo pipefail
out=${1:-gpu-logs}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
step() { echo; echo "=== $* ($(date +%T))"; }
step "GPU"; nvidia-smi -L
step "pytest -m gpu"
python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu tests/adversarial 2>&1 | tee "$out/gpu_tests.log" | tail -n 15
if [ -z "${SKIP_KNOB_EVOLVE:-}" ]; then
step "evolve: knob operators, one GPU"
run=$out/evolve_knobs
python3 scripts/evolve.py --task conv2d --pop 32 --gens 10 --shapes quick --set ray.num_gpus=1 \
    --set eval.max_trials=20 --out "$run" 2>&1 | tee "$out/evolve_knobs.log" | tail -n 30
step "best.cu re-evaluated"
python3 scripts/evaluate.py --task conv2d "$run/best.cu" seed:implicit_gemm 2>&1 | tee "$out/best_eval.log" | tail -n 25
fi
step "evolve: LLM operators against a local server of prepared replies"
python3 scripts/prepared_llm_server.py --replies scripts/prepared_replies/conv2d --port 8765 --seconds 600 \
    --log "$out/prepared_requests.jsonl" & server=$!
sleep 2
OPENAI_API_KEY=not-needed python3 scripts/evolve.py --task conv2d --pop 8 --gens 2 --shapes quick \
    --set ray.num_gpus=1 --set eval.max_trials=10 --llm-model prepared-replies \
    --llm-base-url http://127.0.0.1:8765/v1 --out "$out/evolve_llm" 2>&1 | tee "$out/evolve_llm.log" | tail -n 20
kill $server
step "seed benchmark"
python3 scripts/bench_seeds.py --markdown "$out/seeds.md" 2>&1 | tee "$out/bench_seeds.log" | tail -n 80
step "sandbox cost"
python3 scripts/bench_sandbox.py --repeats 5 2>&1 | tee "$out/bench_sandbox.log" | tail -n 20
