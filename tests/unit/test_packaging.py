"""A non-editable install ships the task library: sdist -> wheel -> fresh venv -> `evo-fsr tasks`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from evo_fsr.tasks import BUILTIN_TASKS_ROOT, discover

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "SECURITY.md", "evo_fsr", "tasks")


def _setuptools_can_build() -> str | None:
    """Why this Python's setuptools cannot build a wheel offline, or None."""
    import importlib.util
    from importlib.metadata import version

    major_minor = tuple(int(p) for p in version("setuptools").split(".")[:2])
    if major_minor < (70, 1) and importlib.util.find_spec("wheel") is None:
        return f"setuptools {version('setuptools')} needs the `wheel` package (pip install '.[dev]' brings >= 70.1)"
    return None


def _build(kind: str, source: Path, out: Path) -> Path:
    """PEP 517 hook of setuptools, run in ``source`` (no network, no build isolation)."""
    reason = _setuptools_can_build()
    if reason:
        pytest.skip(reason)
    code = f"from setuptools import build_meta as b; print(b.build_{kind}({str(out)!r}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=source, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_wheel_from_sdist_installs_in_a_fresh_venv_and_lists_every_task(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in SHIPPED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    sdist = _build("sdist", src, tmp_path / "dist")
    with tarfile.open(sdist) as tar:
        members = tar.getnames()
        assert any(m.endswith("tasks/relu/task.yaml") for m in members)
        tar.extractall(tmp_path / "unpacked")
    unpacked = next((tmp_path / "unpacked").iterdir())
    wheel = _build("wheel", unpacked, tmp_path / "wheels")       # the wheel is built from the sdist
    expected = discover(BUILTIN_TASKS_ROOT)
    assert len(expected) == 21
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    for task in expected:
        assert f"evo_fsr/_tasks/{task}/task.yaml" in names and f"evo_fsr/_tasks/{task}/seeds/naive.cu" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)           # no pip of its own: the system's pip installs the wheel
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "EVO_FSR_TASKS", "EVO_FSR_TASKS_PATH", "VIRTUAL_ENV")}
    install = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                             capture_output=True, text=True, env=env, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    where = subprocess.run([str(py), "-c", "import evo_fsr, evo_fsr.tasks as t; print(evo_fsr.__file__); "
                            "print(t.BUILTIN_TASKS_ROOT)"], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
    module_file, tasks_root = where.stdout.split()
    assert Path(module_file).is_relative_to(venv), f"imported {module_file}, not the wheel's"
    assert Path(tasks_root) == Path(module_file).parent / "_tasks"
    listing = subprocess.run([str(venv / "bin" / "evo-fsr"), "tasks"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=300)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    listed = [line.split()[0] for line in listing.stdout.splitlines()[1:] if line.strip()]
    assert listed == expected and "INVALID" not in listing.stdout


def test_editable_install_finds_the_top_level_tasks(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in SHIPPED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    venv = tmp_path / "venv"            # no pip of its own: the system's pip and setuptools build it, offline
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "EVO_FSR_TASKS", "EVO_FSR_TASKS_PATH", "VIRTUAL_ENV")}
    if _setuptools_can_build():
        pytest.skip(_setuptools_can_build())
    install = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", "-e", str(src)], capture_output=True, text=True, env=env, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    where = subprocess.run([str(py), "-c", "import evo_fsr, evo_fsr.tasks as t; print(evo_fsr.__file__); "
                            "print(t.BUILTIN_TASKS_ROOT); print(len(t.discover()))"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    module_file, tasks_root, count = where.stdout.split()
    assert Path(module_file) == src / "evo_fsr" / "__init__.py", where.stderr
    assert Path(tasks_root) == src / "tasks" and int(count) == 21
