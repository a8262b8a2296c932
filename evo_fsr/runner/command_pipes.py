"""The runner's two pipes (standard library only: the runner imports it from its private copy in
the workdir): command lines in (``Commands``), one JSON reply a command out (``Replies``)."""
from __future__ import annotations

import json
import os
import select
import threading
import time
from typing import Any, Callable

#: how long the runner spins on its command pipe after a line (a wake-up line included) before it
#: blocks: the trusted side wakes it before a window opens (harness.RunnerProcess.wake), so the
#: window's command finds it running, not asleep
SPIN_S = 0.05

#: on a machine of few cores (CI's two) a spin takes the core that the process it waits for needs;
#: there every spin step yields the core first (a GPU host's spare cores keep the pure spin)
FEW_CORES = (os.cpu_count() or 1) <= 4


class Commands:
    """The command pipe's lines.  After each line it spins on the pipe for ``SPIN_S`` before it
    blocks; an empty line is a wake-up (``harness.RunnerProcess.wake``), not a command."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer = fd, b""
        os.set_blocking(fd, False)

    def __iter__(self) -> "Commands":
        return self

    def __next__(self) -> str:
        while True:
            line = self.line()
            if line is None:
                raise StopIteration
            if line.strip():
                return line

    def line(self) -> str | None:
        """The next line, or None at the pipe's end."""
        spin_until = time.perf_counter() + SPIN_S
        while b"\n" not in self.buffer:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                if FEW_CORES:
                    os.sched_yield()
                if time.perf_counter() > spin_until:
                    select.select([self.fd], [], [])
                    spin_until = time.perf_counter() + SPIN_S
                continue
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


class Replies:
    """The reply pipe: one JSON line a command, echoing its ``op`` and ``id``."""

    def __init__(self, fd: int) -> None:
        self.pipe = os.fdopen(fd, "w")

    def send(self, msg: dict[str, Any], data: dict[str, Any]) -> None:
        self.pipe.write(json.dumps({"op": msg.get("op"), "id": msg.get("id"), **data}) + "\n")
        self.pipe.flush()

    def once(self, msg: dict[str, Any]) -> Callable[[dict[str, Any]], bool]:
        """A reply to ``msg`` that is sent once: the first call replies and returns True, any
        later one (``arm``'s timer and its thread race) returns False."""
        replied, lock = threading.Event(), threading.Lock()

        def reply_once(data: dict[str, Any]) -> bool:
            with lock:
                if replied.is_set():
                    return False
                replied.set()
                self.send(msg, data)
                return True
        return reply_once


__all__ = ["Commands", "FEW_CORES", "Replies", "SPIN_S"]
