"""Names the playbook reserves, and the words messages use for the values users write."""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection
from typing import Any

VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Names templates get from orch itself; a playbook var of the same name would hide them.
RESERVED_VAR_NAMES = frozenset(
    {"matrix", "inventory_hostname", "group_names", "groups", "hostvars", "orch_python"}
)

SERVER_ADAPTER_NAMES = ("sglang", "vllm", "generic")
BENCH_ADAPTER_NAMES = (
    "sglang.bench_serving",
    "sglang.bench_one_batch_server",
    "vllm.bench_serve",
    "generic",
)


def is_template(value: Any) -> bool:
    """Whether `value` is a string Jinja2 will render (holds `{{` or `{%`)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def describe(value: Any) -> str:
    """A short human description of a value a user wrote, for 'expected X, got Y'."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return repr(text)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def suggest(word: str, known: Collection[str]) -> str | None:
    """`did you mean 'x'?` for the closest known name, or None."""
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def type_name(value: Any) -> str:
    """The kind of a rendered value, for messages about what a template gave: int, a mapping."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
