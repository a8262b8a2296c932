"""The reply pipe's order check, without a runner: a line already waiting when a command is about
to be sent is a forged or late reply (``crash:sandbox-violation``), and the process is killed.
The end-to-end case (tests/protocol, LATE_LINE) is ordered by the candidate's calls, so there the
line is usually read as the reply to the next command instead; this pins the check itself."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from evo_fsr.runner.harness import ProtocolViolation, RunnerProcess


@pytest.fixture
def runner() -> Iterator[tuple[RunnerProcess, int]]:
    """A RunnerProcess wired to plain pipes and a stand-in process (a sleeping child in its own
    session, as the sandbox starts runners); yields it and the reply pipe's write end."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    cmd_r, cmd_w = os.pipe()
    reply_r, reply_w = os.pipe()
    process = RunnerProcess.__new__(RunnerProcess)
    process.proc, process._cmd_w, process._reply_r = proc, cmd_w, reply_r
    process._buffer, process._ready = b"", True
    try:
        yield process, reply_w
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for fd in (cmd_r, cmd_w, reply_r, reply_w):
            os.close(fd)


def test_an_empty_pipe_lets_the_command_go(runner) -> None:
    process, _ = runner
    process._refuse_unsolicited()
    assert process.proc.poll() is None


def test_a_line_waiting_before_the_command_is_a_violation_and_kills(runner) -> None:
    process, reply_w = runner
    os.write(reply_w, b'{"op": "call", "id": 1, "rc": 0}\n')
    with pytest.raises(ProtocolViolation, match="before the command was sent"):
        process.send({"op": "call"}, timeout_s=1.0)
    assert process.proc.returncode is not None


def test_a_second_line_left_from_the_previous_reply_is_a_violation(runner) -> None:
    process, _ = runner
    process._buffer = b"{}\n"
    with pytest.raises(ProtocolViolation, match="before the command was sent"):
        process.send({"op": "call"}, timeout_s=1.0)
