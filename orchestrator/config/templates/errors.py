"""What a failed render says: undefined names with the close ones, sandbox refusals, syntax."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from jinja2 import TemplateSyntaxError
from jinja2.defaults import DEFAULT_NAMESPACE
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.utils import missing

from orchestrator.errors import InputError, SourceLocation


class UndefinedName(UndefinedError):
    """An undefined name or key, with what was looked up and on what."""

    def __init__(self, message: str, name: Any, obj: Any) -> None:
        super().__init__(message)
        self.name = name
        self.obj = obj


_UNKNOWN = re.compile(r"No (filter|test) named '([^']+)'")

# Names orch defines only where it can know them: why one is undefined here.
_DEFINED_ELSEWHERE = {
    "node_hosts": "a multi-node cell on a Slurm host has no node_hosts: Slurm picks the job's "
    "nodes when it starts; head_host (filled in then), node_rank and nnodes are defined",
}


def syntax_error(
    exc: TemplateSyntaxError, where: SourceLocation, key_path: str, env: Any = None
) -> InputError:
    """A template that does not parse, as an InputError; an unknown filter or test is named."""
    line = f" (line {exc.lineno} of the template)" if exc.lineno and exc.lineno > 1 else ""
    unknown = _UNKNOWN.search(exc.message or "")
    if unknown and env is not None:
        kind, name = unknown.groups()
        known = env.filters if kind == "filter" else env.tests
        close = _close(name, known)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else None
        return InputError(
            f"unknown {kind} {name!r}{line}", location=where, key_path=key_path, hint=hint
        )
    return InputError(
        f"template syntax error: {exc.message}{line}",
        location=where,
        key_path=key_path,
        hint="Jinja syntax: {{ expression }}, {% statement %}",
    )


def _close(name: str, candidates: Iterable[Any]) -> list[str]:
    words = [c for c in candidates if isinstance(c, str)]
    return difflib.get_close_matches(name, words, n=3, cutoff=0.6)


def _close_variables(name: str, scope: Iterable[Any]) -> list[str]:
    """Close names for an undefined variable: the user's variables first; Jinja's globals
    (range, dict, cycler, ...) only when very close, so `cluster` is not offered `cycler`."""
    names = [c for c in scope if isinstance(c, str)]
    own = _close(name, [c for c in names if c not in DEFAULT_NAMESPACE])
    builtin = difflib.get_close_matches(name, [c for c in names if c in DEFAULT_NAMESPACE], 1, 0.8)
    return (own + builtin)[:3]


def render_error(
    exc: Exception, scope: Mapping[str, Any], where: SourceLocation, key_path: str
) -> InputError:
    """Turn anything a render raised into an InputError at the string's location."""
    if isinstance(exc, UndefinedName):
        name = exc.name
        if exc.obj is missing:
            close = _close_variables(str(name), scope)
            hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else None
            hint = _DEFINED_ELSEWHERE.get(str(name), hint)
            return InputError(
                f"undefined variable {name!r}",
                location=where,
                key_path=key_path,
                hint=hint or "define it under vars:, in the inventory, or with -e",
            )
        if isinstance(exc.obj, Mapping):
            keys = list(exc.obj)
            close = _close(str(name), keys)
            if close:
                hint = f"did you mean {' or '.join(repr(c) for c in close)}?"
            else:
                shown = ", ".join(repr(k) for k in keys[:10]) + (", ..." if len(keys) > 10 else "")
                hint = f"its keys: {shown}" if keys else "the mapping is empty"
            return InputError(
                f"undefined key {name!r}", location=where, key_path=key_path, hint=hint
            )
        return InputError(f"undefined value: {exc}", location=where, key_path=key_path)
    if isinstance(exc, SecurityError):
        return InputError(
            f"unsafe template refused by the sandbox: {exc}",
            location=where,
            key_path=key_path,
        )
    if isinstance(exc, TemplateSyntaxError):
        return syntax_error(exc, where, key_path)
    return InputError(
        f"template failed: {type(exc).__name__}: {exc}", location=where, key_path=key_path
    )
