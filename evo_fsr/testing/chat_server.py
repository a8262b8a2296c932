"""A local OpenAI-compatible chat server (loopback only) that answers with prepared replies.

For tests and for demonstrating the LLM path on machines that reach no LLM service.  What it
serves is whatever the caller prepared; it is never a model's work, and the run records mark
the endpoint by its model name (choose one that says so, e.g. ``prepared-replies``).

``respond(request_body) -> step`` decides each answer; a step is a dict:
``{"content": str}`` (200), ``{"status": 429}`` (an error status), ``{"delay_s": 2, ...}``
(slow), ``{"raw": "not json"}`` (a malformed body).
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Step = dict[str, Any]


class LocalChatServer:
    def __init__(self, respond: Callable[[dict[str, Any]], Step], port: int = 0) -> None:
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
                    step = respond(body)
                if step.get("delay_s"):
                    time.sleep(step["delay_s"])
                status = step.get("status", 200)
                if status != 200:
                    payload = json.dumps({"error": {"message": f"prepared {status}", "type": "test"}}).encode()
                elif "raw" in step:
                    payload = step["raw"].encode()
                else:
                    payload = json.dumps({
                        "id": "chatcmpl-local", "object": "chat.completion", "created": 0, "model": body.get("model"),
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
