"""The runner's lines as the controller reads them (execute/apply/events.py)."""

from __future__ import annotations

import json

import pytest

from orchestrator.execute.apply.events import read_event


def test_a_well_formed_event_passes_whole() -> None:
    line = json.dumps({"event": "repeat", "cell": "c", "seconds": 1.5, "rc": 0, "extra": [1]})
    assert read_event(line) == (json.loads(line), None)


@pytest.mark.parametrize("line", ["plain text", "", "[1, 2]", '"a string"', "{broken"])
def test_a_programs_own_output_is_plain_noise(line: str) -> None:
    assert read_event(line) == (None, None)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"event": "repeat", "seconds": "abc"}, "`seconds` is not int or float"),
        ({"event": "repeat", "seconds": True}, "`seconds` is not int or float"),
        ({"event": "done", "cell": 3}, "`cell` is not a string"),
        ({"event": 5}, "`event` is not a string"),
        ({"event": "archive", "bytes": 1.5}, "`bytes` is not int"),
    ],
)
def test_a_field_of_the_wrong_type_is_noise_that_says_why(fields: dict, why: str) -> None:
    event, problem = read_event(json.dumps(fields))
    assert event is None and problem is not None and why in problem


def test_null_and_unknown_fields_and_kinds_pass() -> None:
    assert read_event('{"event": "done", "cell": "c", "archive": null}')[0] is not None
    assert read_event('{"event": "newer", "cell": "c", "x": {"y": 1}}')[0] is not None
