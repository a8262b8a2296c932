"""Every kind of malformed or forged reply is a ProtocolError (the verdict crash:sandbox-violation);
nothing else can come out of check_reply."""
from __future__ import annotations

import json
import math

import pytest

from evo_fsr.runner.protocol import ProtocolError, check_reply

CALL = {"op": "call", "id": 123456789}
GOOD = {"op": "call", "id": 123456789, "rc": 0, "last_error": 0, "last_error_name": "", "event_ms": 1.0,
        "event_all_ms": 1.01, "host_ms": 1.2}


def test_a_well_formed_reply_passes() -> None:
    assert check_reply(CALL, dict(GOOD)) == GOOD
    error = {"op": "call", "id": 123456789, "error": "cudaErrorIllegalAddress", "cuda_error": "x"}
    assert check_reply(CALL, error) == error


@pytest.mark.parametrize("reply", [
    [1, 2, 3],                                           # not an object
    "call",
    {**GOOD, "id": 1},                                   # a guessed id
    {**GOOD, "op": "probe"},                             # another command's reply
    {k: v for k, v in GOOD.items() if k != "event_ms"},  # missing time
    {**GOOD, "event_ms": "0.001"},                       # a string
    {**GOOD, "event_ms": True},                          # a bool is not a number
    {**GOOD, "event_ms": -1.0},                          # negative
    {**GOOD, "event_ms": math.nan},                      # not finite
    {**GOOD, "event_all_ms": math.inf},
    {**GOOD, "event_all_ms": 0.5},                       # device-wide shorter than the stream
    {**GOOD, "rc": 0.5},                                 # rc must be an integer
    {**GOOD, "last_error_name": "x" * 1000},             # oversized text
    {"op": "call", "id": 123456789, "error": ["not", "text"]},
])
def test_malformed_or_forged_replies_are_protocol_errors(reply) -> None:
    with pytest.raises(ProtocolError):
        check_reply(CALL, json.loads(json.dumps(reply)) if not isinstance(reply, float) else reply)


def test_init_and_attach_replies_need_ok() -> None:
    with pytest.raises(ProtocolError):
        check_reply({"op": "attach", "id": 5}, {"op": "attach", "id": 5})
    with pytest.raises(ProtocolError):
        check_reply({"op": "init", "id": 5}, {"op": "init", "id": 5, "ok": True, "startup_ms": {"a": "slow"}})
    assert check_reply({"op": "attach", "id": 5}, {"op": "attach", "id": 5, "ok": True})
