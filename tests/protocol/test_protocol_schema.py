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


def test_arm_and_finish_replies_are_checked() -> None:
    """A chained window's two replies (verdict/chain.py): ``arm`` must say whether all was enqueued,
    ``finish`` carries a call's times and is held to the same schema."""
    arm = {"op": "arm", "id": 7}
    good_arm = {"op": "arm", "id": 7, "rc": 0, "last_error": 0, "last_error_name": "", "complete": True}
    assert check_reply(arm, dict(good_arm)) == good_arm
    for bad in ({k: v for k, v in good_arm.items() if k != "complete"}, {**good_arm, "complete": "yes"},
                {**good_arm, "rc": "0"}, {**good_arm, "op": "call"}):
        with pytest.raises(ProtocolError):
            check_reply(arm, bad)
    finish = {"op": "finish", "id": 8}
    good_finish = {**GOOD, "op": "finish", "id": 8}
    assert check_reply(finish, dict(good_finish)) == good_finish
    for bad in ({**good_finish, "event_all_ms": 0.5}, {k: v for k, v in good_finish.items() if k != "host_ms"}):
        with pytest.raises(ProtocolError):
            check_reply(finish, bad)
