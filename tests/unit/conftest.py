"""Fixtures for the engine, LLM, operator, worker and store tests (no GPU needed)."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

from evo_fsr.config import RunConfig, load_config
from evo_fsr.synthetic import SYNTHETIC_KERNEL as GOOD_KERNEL
from evo_fsr.tasks import Task, get_task



@pytest.fixture(scope="session")
def conv2d() -> Task:
    return get_task("conv2d")


@pytest.fixture
def make_config() -> Callable[..., RunConfig]:
    def make(**overrides: Any) -> RunConfig:
        return load_config(overrides={"task": "conv2d", **overrides})
    return make


class FakeOpenAI:
    """A local OpenAI-compatible server: /v1/chat/completions answers from a script of replies.

    Each scripted reply is a dict: {"content": str} (200), {"status": 429} (an error status),
    {"delay_s": 2, "content": ...} (slow), {"raw": "not json"} (malformed body)."""

    def __init__(self) -> None:
        self.script: list[dict[str, Any]] = []
        self.default: dict[str, Any] = {"content": f"```cuda\n{GOOD_KERNEL}```"}
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with server._lock:
                    server.requests.append({"path": self.path, "body": body})
                    step = server.script.pop(0) if server.script else server.default
                if step.get("delay_s"):
                    time.sleep(step["delay_s"])
                status = step.get("status", 200)
                if status != 200:
                    payload = json.dumps({"error": {"message": f"scripted {status}", "type": "test"}}).encode()
                elif "raw" in step:
                    payload = step["raw"].encode()
                else:
                    payload = json.dumps({
                        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model"),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": step["content"]}}],
                        "usage": {"prompt_tokens": step.get("prompt_tokens", 100),
                                  "completion_tokens": step.get("completion_tokens", 50), "total_tokens": 150},
                    }).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    if status == 429:
                        self.send_header("retry-after", "0")
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_openai() -> Any:
    server = FakeOpenAI()
    yield server
    server.close()
