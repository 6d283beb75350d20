"""Names the playbook reserves, and the words messages use for the values users write."""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection
from typing import Any

from orchestrator.errors import is_known_secret
from orchestrator.runner.redaction import ORCH_TEMPLATE_NAMES

VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Names templates get from orch itself; a playbook var of the same name would hide them.
RESERVED_VAR_NAMES = frozenset(ORCH_TEMPLATE_NAMES)

SERVER_ADAPTER_NAMES = ("sglang", "vllm", "generic")
BENCH_ADAPTER_NAMES = (
    "sglang.bench_serving",
    "sglang.bench_one_batch_server",
    "vllm.bench_serve",
    "guidellm",
    "aiperf",
    "generic",
)


def is_template(value: Any) -> bool:
    """Whether `value` is a string Jinja2 will render (holds `{{` or `{%`)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def describe_document(value: Any) -> str:
    """What a whole file holds when it is not the mapping expected: never its text (a file
    that is not YAML reads as one long string, e.g. /etc/passwd)."""
    if isinstance(value, str):
        return "plain text, not YAML keys and values"
    return describe(value)


def describe(value: Any) -> str:
    """A short human description of a value a user wrote, for 'expected X, got Y'."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float) and is_known_secret(str(value)):
        return "a secret value"  # from a secret-named variable: the key is named, never this
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


# What a message may quote of a key or line read from a file: a name, not a line of data.
# `root:$6$...:19000:0:99999:7:::` (a /etc/shadow line read as a key) is never echoed.
_QUOTABLE = re.compile(r"[A-Za-z0-9_.,;=@\[\] -]*:?[A-Za-z0-9_.,;=@\[\] -]*")
QUOTABLE_MAX = 40


def quotable(text: Any) -> bool:
    """Whether a message may quote `text` (a key or word read from a file): short, one line,
    name-like (at most one ':', none of $ / * ! # and the like), not a known secret."""
    return (
        isinstance(text, str)
        and 0 < len(text) <= QUOTABLE_MAX
        and _QUOTABLE.fullmatch(text) is not None
        and not is_known_secret(text)
    )


def shown(text: Any, instead: str = "(not shown: it does not look like a name)") -> str:
    """`repr(text)` when a message may quote it (`quotable`), else the neutral `instead`."""
    return repr(text) if quotable(text) else instead


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
