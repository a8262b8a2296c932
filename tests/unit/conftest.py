"""Fixtures for the engine, LLM, operator, worker and store tests (no GPU needed)."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from evo_fsr.config import RunConfig, load_config
from evo_fsr.testing.chat_server import LocalChatServer
from evo_fsr.testing.synthetic import SYNTHETIC_KERNEL as GOOD_KERNEL
from evo_fsr.tasks import Task, get_task


@pytest.fixture(scope="session")
def conv2d() -> Task:
    return get_task("conv2d")


@pytest.fixture
def make_config() -> Callable[..., RunConfig]:
    def make(**overrides: Any) -> RunConfig:
        return load_config(overrides={"task": "conv2d", **overrides})
    return make


class FakeOpenAI(LocalChatServer):
    """The local OpenAI-compatible server answering from a script of replies (then ``default``).

    Each scripted reply is a dict: {"content": str} (200), {"status": 429} (an error status),
    {"delay_s": 2, "content": ...} (slow), {"raw": "not json"} (malformed body)."""

    def __init__(self) -> None:
        self.script: list[dict[str, Any]] = []
        self.default: dict[str, Any] = {"content": f"```cuda\n{GOOD_KERNEL}```"}
        super().__init__(lambda body: self.script.pop(0) if self.script else self.default)


@pytest.fixture
def fake_openai() -> Any:
    server = FakeOpenAI()
    yield server
    server.close()
