"""The runner's stdout lines as the controller reads them: one parser for a live queue and a
resume's collect. A line whose fields have the wrong types is noise (kept, with why), never an
exception: a hostile or broken host must not take the controller's reader down."""

from __future__ import annotations

import json
from typing import Any

_NUMBER = (int, float)
# The fields the controller reads, by event kind, with the types it accepts (when present and
# not null). Unknown kinds and fields pass: a newer runner may say more.
_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "step": {"step": (str,), "status": (str,), "reason": (str,), "detail": (dict, str)},
    "repeat": {"seconds": _NUMBER, "rc": (int,), "n": (int, str), "kind": (str,)},
    "repeats": {"ran": (int,), "stopped": (str,)},
    "done": {"status": (str,), "archive": (str,), "reason": (str,), "step": (str,)},
    "warning": {"what": (str,)},
    "archive": {"bytes": (int,), "error": (str,), "sha256": (str,)},
    "archive_data": {"data": (str,)},
    "archive_end": {"sha256": (str,)},
    "task_end": {"rank": (int,), "rc": (int,), "node": (str,)},
    "slurm_job": {"job_id": (str, int), "name": (str,), "nodes": (str,)},
    "facts": {"data": (dict, str)},
    "heartbeat": {"t": _NUMBER},
}


def read_event(line: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the event, None) for a well-formed event line; (None, why) for noise, where `why` is
    None for plain text (a program's own output) and names the bad field otherwise."""
    try:
        event = json.loads(line)
    except ValueError:
        return None, None
    if not isinstance(event, dict):
        return None, None
    kind = event.get("event")
    if kind is not None and not isinstance(kind, str):
        return None, "an event whose `event` is not a string"
    cell = event.get("cell")
    if cell is not None and not isinstance(cell, str):
        return None, f"a {kind} event whose `cell` is not a string"
    for name, types in _FIELDS.get(str(kind), {}).items():
        value = event.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            wanted = " or ".join(t.__name__ for t in types)
            return None, f"a {kind} event whose `{name}` is not {wanted}: {value!r:.60}"
    return event, None
