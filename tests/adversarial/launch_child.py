"""Loads a compiled candidate the way the runner does (confinement first, then libcudart, then
the candidate) and calls its ``launch`` once with the given arguments; no GPU needed for the
host-side behaviour the CPU tests look at.  Run by test_adversarial_v2_cpu.py:

    python -I -S launch_child.py POLICY_JSON_FILE|- CANDIDATE_SO ARGS_JSON [EXTRA_FD...]

ARGS_JSON: a list of ["p", 0] | ["i", 7] | ["f", 1.5]; prints one JSON line with launch's result.
"""
import ctypes
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

policy = {} if sys.argv[1] == "-" else json.load(open(sys.argv[1]))
status = {}
if policy:
    import confine  # noqa: E402 - the copy next to this file
    status = confine.startup(policy)
import cudart  # noqa: E402

result = {"status": status}
try:
    cudart.load_library()
    result["cudart"] = True
except OSError as exc:
    result["cudart"] = str(exc)[:300]
if policy:
    status.update(confine.after_init(policy))
kinds = {"p": ctypes.c_void_p, "i": ctypes.c_int, "f": ctypes.c_float}
spec = json.loads(sys.argv[3])
try:
    fn = ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_LOCAL).launch
    fn.restype = ctypes.c_int
    fn.argtypes = [kinds[k] for k, _ in spec]
    result["rc"] = fn(*[v for _, v in spec])
except OSError as exc:
    result["error"] = str(exc)[:300]
print(json.dumps(result), flush=True)
