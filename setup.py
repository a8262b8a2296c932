"""Packages of the wheel: evo_fsr and its subpackages, plus the task library.

tasks/ stays at the repository top level (one folder per task, edited as data) and ships as the
data package ``evo_fsr._tasks``; evo_fsr/tasks.py finds it there in an installed wheel and at
``<repo>/tasks`` in a checkout or an editable install.  Everything else is in pyproject.toml.
"""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["evo_fsr", "evo_fsr.*"]) + ["evo_fsr._tasks"],
      package_dir={"evo_fsr._tasks": "tasks"})
