"""Task discovery: built-in tasks, $EVO_FSR_TASKS_PATH and `evo-fsr --tasks-dir`."""
from __future__ import annotations

import os
import shutil

import pytest

from evo_fsr.cli import main as evo_main, take_tasks_dirs
from evo_fsr.tasks import BUILTIN_TASKS_ROOT, TASKS_PATH_ENV, TaskError, discover, get_task, task_roots


@pytest.fixture
def my_tasks(tmp_path, monkeypatch):
    monkeypatch.setenv(TASKS_PATH_ENV, "")
    monkeypatch.delenv("EVO_FSR_TASKS", raising=False)
    root = tmp_path / "mine"
    shutil.copytree(BUILTIN_TASKS_ROOT / "relu", root / "my_relu")
    text = (root / "my_relu" / "task.yaml").read_text().replace("name: relu", "name: my_relu", 1)
    (root / "my_relu" / "task.yaml").write_text(text)
    return root


def test_env_path_adds_task_folders_before_the_builtin_ones(my_tasks, monkeypatch) -> None:
    builtin = discover()
    assert "my_relu" not in builtin and len(builtin) == 21
    monkeypatch.setenv(TASKS_PATH_ENV, os.pathsep.join([str(my_tasks), str(my_tasks / "missing")]))
    assert task_roots()[0] == my_tasks and task_roots()[-1] == BUILTIN_TASKS_ROOT
    assert sorted(discover()) == sorted(builtin + ["my_relu"])
    assert get_task("my_relu").root == my_tasks / "my_relu" and get_task("conv2d").root.parent == BUILTIN_TASKS_ROOT
    # a folder of the same name in a user root wins over the built-in one
    shutil.copytree(my_tasks / "my_relu", my_tasks / "relu")
    (my_tasks / "relu" / "task.yaml").write_text(
        (my_tasks / "relu" / "task.yaml").read_text().replace("name: my_relu", "name: relu", 1))
    assert get_task("relu").root == my_tasks / "relu" and discover().count("relu") == 1


def test_unknown_task_lists_the_folders_searched(my_tasks, monkeypatch) -> None:
    monkeypatch.setenv(TASKS_PATH_ENV, str(my_tasks))
    with pytest.raises(TaskError) as info:
        get_task("nope")
    assert "my_relu" in str(info.value) and str(my_tasks) in str(info.value) and str(BUILTIN_TASKS_ROOT) in str(info.value)


def test_tasks_dir_option_anywhere_on_the_command_line(my_tasks, capsys) -> None:
    assert take_tasks_dirs(["eval", "--tasks-dir", "a", "--task", "x", "--tasks-dir=b"]) == (["eval", "--task", "x"], ["a", "b"])
    assert evo_main(["tasks", "--tasks-dir", str(my_tasks), "my_relu"]) == 0
    assert capsys.readouterr().out.startswith("my_relu (fp32_strict)")
    assert os.environ[TASKS_PATH_ENV].split(os.pathsep)[0] == str(my_tasks)


def test_tasks_dir_that_is_not_a_folder_is_one_line(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv(TASKS_PATH_ENV, "")
    assert evo_main(["--tasks-dir", str(tmp_path / "nope"), "tasks"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a directory" in err and "\n" not in err


def test_help_lists_the_new_commands(capsys) -> None:
    assert evo_main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("report", "export", "import-kernelbench", "--tasks-dir"):
        assert name in out
    for name in ("report", "export", "import-kernelbench"):
        with pytest.raises(SystemExit) as info:
            evo_main([name, "--help"])
        assert info.value.code == 0
        assert f"usage: evo-fsr {name}" in capsys.readouterr().out
