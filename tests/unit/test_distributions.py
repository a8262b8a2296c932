"""Task input distributions, validation plan, determinism and timed-input keys (issue 11).

Every task's every distribution generates the declared dtypes and shapes, deterministically per
seed, with a finite float64 reference; the validation plan covers every distribution on at
least two shapes, one odd-sized; the loader rejects bad values with file, key and problem.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from evo_fsr.tasks import DEFAULT_TASKS_ROOT, Task, TaskError, discover, get_task, load_task
from evo_fsr.task_inputs import validation_plan

NAMES = discover()
#: shapes with more input elements are left to the GPU suite (CPU time)
CPU_ELEMENTS = 3_100_000


def _input_elements(task: Task, shape) -> int:
    return sum(a.numel(shape.env) for a in task.args if a.role in ("input", "inout"))


def _odd(task: Task, shape) -> bool:
    return any(d > 1 and d % 2 for a in task.args if a.is_buffer and a.role != "workspace"
               for d in a.dims_of(shape.env))


# -- every distribution of every task --------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_every_distribution_generates_declared_inputs_and_a_finite_reference(name: str) -> None:
    task = get_task(name)
    plan = task.validation_plan(1)
    buffers = [a for a in task.args if a.role in ("input", "inout")]
    outputs = [a for a in task.args if a.role in ("output", "inout")]
    for dist in task.distributions:
        shapes = [s for s, c in plan if c == dist and _input_elements(task, s) <= CPU_ELEMENTS]
        assert shapes, (name, dist, "no planned shape small enough for the CPU")
        for shape in shapes:
            where = (name, dist, shape.label)
            first = task.make_inputs(shape.env, np.random.default_rng(11), dist)
            again = task.make_inputs(shape.env, np.random.default_rng(11), dist)
            other = task.make_inputs(shape.env, np.random.default_rng(12), dist)
            assert set(first) == {a.name for a in buffers}, where
            for arg in buffers:
                arr = first[arg.name]
                assert arr.dtype == np.dtype(arg.dtype), (*where, arg.name, arr.dtype)
                assert arr.shape == arg.dims_of(shape.env), (*where, arg.name, arr.shape)
                assert np.all(np.isfinite(arr)), (*where, arg.name, "non-finite input")
                assert np.array_equal(arr.view(np.uint8), again[arg.name].view(np.uint8)), \
                    (*where, arg.name, "not deterministic for a seed")
            if sum(first[a.name].size for a in buffers) > 64:
                assert any(not np.array_equal(first[a.name], other[a.name]) for a in buffers), \
                    (*where, "another seed gives the same inputs")
            with np.errstate(over="raise", invalid="raise", divide="raise"):   # no overflow, 0/0, x/0
                ref = task.reference(first, shape.env)
            assert set(ref) == {a.name for a in outputs}, where
            for arg in outputs:
                r = np.asarray(ref[arg.name], dtype=np.float64)
                assert r.shape == arg.dims_of(shape.env), (*where, arg.name)
                assert np.all(np.isfinite(r)), (*where, arg.name, "reference not finite")


@pytest.mark.parametrize("name", NAMES)
def test_every_task_yaml_states_the_input_keys(name: str) -> None:
    """Each shipped task decides its distributions, determinism and timed inputs explicitly."""
    raw = yaml.safe_load((DEFAULT_TASKS_ROOT / name / "task.yaml").read_text())
    assert {"distributions", "determinism", "timed_inputs"} <= set(raw), name
    task = get_task(name)
    assert task.distributions == tuple(raw["distributions"])
    assert task.determinism in ("bitwise", "tolerance") and task.timed_inputs in ("mix", "mix_rows", "regenerate")
    assert len(task.distributions) >= 2, (name, "at least one distribution beyond the benchmark one")
    declared = {s["case"] for s in raw["validation"] if "case" in s}
    assert declared <= set(task.distributions)


def test_tasks_with_linked_buffers_mix_whole_rows() -> None:
    linked = {n for n in NAMES if get_task(n).timed_inputs in ("mix_rows", "regenerate")}
    assert {"mse_loss", "linear_regression"} <= linked
    assert "softmax" not in linked and "conv2d" not in linked


# -- the validation plan -------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seeds", [1, 2, 3])
def test_validation_plan_covers_every_distribution(name: str, seeds: int) -> None:
    task = get_task(name)
    plan = task.validation_plan(seeds)
    assert plan == task.validation_plan(seeds), "not deterministic"
    # validation order, every shape at least `seeds` times
    order = [task.validation.index(s) for s, _ in plan]
    assert order == sorted(order)
    for i, shape in enumerate(task.validation):
        runs = [c for s, c in plan if s is shape]
        assert len(runs) >= seeds, (shape.label, runs)
        if task.validation_cases[i] is not None:
            assert runs == [task.validation_cases[i]] * seeds, (shape.label, runs)
    has_odd = any(_odd(task, s) for s in task.validation)
    for dist in task.distributions:
        shapes = {task.validation.index(s) for s, c in plan if c == dist}
        assert len(shapes) >= 2, (name, dist, shapes)
        if has_odd:
            assert any(_odd(task, task.validation[i]) for i in shapes), (name, dist, "no odd-sized shape")
        assert all(c in task.distributions for _, c in plan)


def test_validation_plan_prefers_shapes_with_elements_and_spreads_hosts() -> None:
    shapes = ["tiny", "a", "b", "c", "d", "e", "f"]
    elements = [1] + [100] * 6
    plan = validation_plan(shapes, [None] * 7, ("random", "x", "y"),
                           odd=[True, False, True, False, True, False, True], elements=elements, seeds=1)
    hosts: dict[str, set[str]] = {}
    for s, c in plan:
        hosts.setdefault(c, set()).add(s)
    for dist in ("random", "x", "y"):
        assert len(hosts[dist] - {"tiny"}) >= 2 and hosts[dist] & {"b", "d", "f"}, (dist, hosts)
    assert [s for s, _ in plan].count("tiny") == 1
    assert len(plan) == 7        # 6 hosts, 3 of them odd, suffice for 3 distributions: no extra runs
    # with only two odd hosts for three distributions one of them must host two
    plan = validation_plan(shapes, [None] * 7, ("random", "x", "y"),
                           odd=[True, False, True, False, True, False, False], elements=elements, seeds=1)
    assert len(plan) == 8


def test_validation_plan_adds_runs_when_shapes_are_few() -> None:
    plan = validation_plan(["p", "q"], [None, "x"], ("random", "x", "y", "z"), odd=[True, True],
                           elements=[50, 50], seeds=1)
    assert ("q", "x") in plan
    for dist in ("random", "y", "z"):
        assert ("p", dist) in plan
    with pytest.raises(ValueError):
        validation_plan(["p"], [None], ("random",), [True], [9], seeds=0)


# -- loader errors ---------------------------------------------------------------------------------
def _copy_task(tmp_path: Path, name: str, edit) -> Path:  # type: ignore[no-untyped-def]
    folder = tmp_path / name
    shutil.copytree(DEFAULT_TASKS_ROOT / name, folder)
    raw = yaml.safe_load((folder / "task.yaml").read_text())
    edit(raw)
    (folder / "task.yaml").write_text(yaml.safe_dump(raw))
    return folder


@pytest.mark.parametrize("edit, key, problem", [
    (lambda r: r.update(distributions="random"), "distributions", "non-empty list"),
    (lambda r: r.update(distributions=[]), "distributions", "non-empty list"),
    (lambda r: r.update(distributions=["random", 3]), "distributions[1]", "not a case name"),
    (lambda r: r.update(distributions=["random", "random"]), "distributions", "listed twice"),
    (lambda r: r.update(distributions=["random", "large_magnitude", "no_such_case"]), "distributions[2]",
     "make_inputs(case='no_such_case') failed"),
    (lambda r: r.update(distributions=["random"]), "validation[6].case",
     "'large_magnitude' is not one of the distributions"),
    (lambda r: r.update(determinism="exact"), "determinism", "not one of bitwise, tolerance"),
    (lambda r: r.update(timed_inputs="rotate"), "timed_inputs", "not one of mix, mix_rows, regenerate"),
])
def test_bad_input_keys_name_file_key_and_problem(tmp_path: Path, edit, key: str, problem: str) -> None:  # type: ignore[no-untyped-def]
    folder = _copy_task(tmp_path, "conv2d", edit)
    with pytest.raises(TaskError) as info:
        load_task(folder)
    assert info.value.file.endswith("task.yaml")
    assert info.value.key == key
    assert problem in info.value.problem


def test_broken_reference_py_is_reported(tmp_path: Path) -> None:
    folder = _copy_task(tmp_path, "relu", lambda r: None)
    (folder / "reference.py").write_text("import numpy as np\ndef make_inputs(:\n")
    with pytest.raises(TaskError) as info:
        load_task(folder)
    assert info.value.file.endswith("reference.py") and "SyntaxError" in info.value.problem


def test_benchmark_case_must_be_a_distribution(tmp_path: Path) -> None:
    folder = _copy_task(tmp_path, "histogram", lambda r: r.update(distributions=["random", "one_bin", "first_last"]))
    with pytest.raises(TaskError) as info:
        load_task(folder)
    assert info.value.key.startswith("validation[") or info.value.key.startswith("benchmarks.large[")
    folder = _copy_task(tmp_path / "b", "histogram",
                        lambda r: r.update(distributions=["random", "one_bin", "first_last", "sorted"],
                                           validation=[s for s in r["validation"] if s.get("case") != "gaussian"]))
    with pytest.raises(TaskError) as info:
        load_task(folder)
    assert info.value.key == "benchmarks.large[2].case" and "'gaussian'" in info.value.problem


@pytest.mark.parametrize("name, determinism", [("sort", "bitwise"), ("softmax", "tolerance")])
def test_defaults_without_the_keys(tmp_path: Path, name: str, determinism: str) -> None:
    def drop(raw: dict) -> None:
        for key in ("distributions", "determinism", "timed_inputs"):
            raw.pop(key)
    task = load_task(_copy_task(tmp_path, name, drop))
    assert task.determinism == determinism          # exact -> bitwise, float -> tolerance
    assert task.timed_inputs == "mix"
    declared = [c for c in task.validation_cases if c is not None]
    assert task.distributions == tuple(dict.fromkeys(["random", *declared]))
