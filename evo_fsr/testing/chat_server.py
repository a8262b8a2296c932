"""A local OpenAI-compatible chat server (loopback only) that answers with prepared replies.

For tests and for demonstrating the LLM path on machines that reach no LLM service.  What it
serves is whatever the caller prepared; it is never a model's work, and the run records mark
the endpoint by its model name (choose one that says so, e.g. ``prepared-replies``).

``respond(request_body) -> step`` decides each chat answer; a step is a dict:
``{"content": str}`` (200), ``{"status": 429}`` (an error status), ``{"delay_s": 2, ...}``
(slow), ``{"raw": "not json"}`` (a malformed body).

Error answers carry ``retry-after-ms: 10`` (``retry_after_ms``), so client retries are quick.
``GET /v1/models`` and ``/v1/models/<id>``: with ``models=None`` every model name exists;
with a list, only those; ``api_key`` set: any other key gets 401.  ``SilentServer`` accepts
connections and never answers (a hung endpoint).
"""
from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Sequence

from ..llm.diff import apply_reply

Step = dict[str, Any]


class LocalChatServer:
    def __init__(self, respond: Callable[[dict[str, Any]], Step], port: int = 0,
                 models: Sequence[str] | None = None, api_key: str | None = None) -> None:
        self.requests: list[dict[str, Any]] = []       # chat completions (POST)
        self.model_queries: list[str] = []              # GET paths (the preflight)
        self.models = list(models) if models is not None else None
        self.api_key = api_key
        self.retry_after_ms = 10
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    if status != 200:                # the openai client honours it when it retries
                        self.send_header("retry-after-ms", str(server.retry_after_ms))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _error(self, status: int, message: str) -> None:
                self._send(status, json.dumps({"error": {"message": message, "type": "test"}}).encode())

            def _authorised(self) -> bool:
                if server.api_key is None or self.headers.get("authorization") == f"Bearer {server.api_key}":
                    return True
                self._error(401, "Incorrect API key provided")
                return False

            def do_GET(self) -> None:  # noqa: N802
                with server._lock:
                    server.model_queries.append(self.path)
                if not self._authorised():
                    return
                if self.path.rstrip("/") == "/v1/models":
                    data = [{"id": m, "object": "model", "created": 0, "owned_by": "local"} for m in server.models or ()]
                    self._send(200, json.dumps({"object": "list", "data": data}).encode())
                elif self.path.startswith("/v1/models/"):
                    name = self.path[len("/v1/models/"):]
                    if server.models is not None and name not in server.models:
                        self._error(404, f"The model `{name}` does not exist")
                    else:
                        self._send(200, json.dumps({"id": name, "object": "model", "created": 0,
                                                    "owned_by": "local"}).encode())
                else:
                    self._error(404, "not found")

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if not self._authorised():
                    return
                with server._lock:
                    server.requests.append({"path": self.path, "body": body})
                    step = respond(body)
                if step.get("delay_s"):
                    time.sleep(step["delay_s"])
                status = step.get("status", 200)
                if status != 200:
                    self._error(status, f"prepared {status}")
                    return
                if "raw" in step:
                    self._send(200, step["raw"].encode())
                    return
                self._send(200, json.dumps({
                    "id": "chatcmpl-local", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": step["content"]}}],
                    "usage": {"prompt_tokens": step.get("prompt_tokens", 100),
                              "completion_tokens": step.get("completion_tokens", 50), "total_tokens": 150},
                }).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class SilentServer:
    """A loopback socket that accepts connections and never replies (a hung endpoint)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)            # the kernel completes handshakes; nothing is ever read

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def close(self) -> None:
        self.sock.close()


def refused_url() -> str:
    """A loopback URL on which connections are refused (a port bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


DIFF_MARK = "<<<<<<< SEARCH"


def prepared_responder(replies: Sequence[str]) -> Callable[[dict[str, Any]], Step]:
    """Serve prepared replies (written by a person, never a model's work) to LLM requests.

    A request asking for SEARCH/REPLACE edits gets a prepared edit (a reply holding
    "<<<<<<< SEARCH"): the next one in turn whose blocks apply to the parent in the prompt (the
    first ```cuda block), else the next one in turn (which then fails to apply, and the run
    records why).  Other requests get the full-file replies in turn."""
    diffs = [r for r in replies if DIFF_MARK in r]
    full = itertools.cycle([r for r in replies if DIFF_MARK not in r] or list(replies))
    turn = itertools.count()

    def respond(body: dict[str, Any]) -> Step:
        user = (body.get("messages") or [{}])[-1].get("content", "")
        if DIFF_MARK in user and diffs:
            start = next(turn)
            order = [diffs[(start + i) % len(diffs)] for i in range(len(diffs))]
            parent = user.split("```cuda\n", 1)[1].split("\n```", 1)[0] if "```cuda\n" in user else ""
            return {"content": next((d for d in order if apply_reply(parent, d).ok), order[0])}
        return {"content": next(full)}

    return respond
