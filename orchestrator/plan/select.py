"""Cell selectors, one syntax for every command that picks cells (plan/apply --cells, bisect
--cell, audit --cells, replay): `axis=value,axis!=value,host=gpu*` (shell globs in values),
or a cell id prefix or glob."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, TypeVar

from orchestrator.cell import canonical_json
from orchestrator.errors import InputError

T = TypeVar("T")

_GLOB = frozenset("*?[")
_SHOWN_VALUES = 8  # per axis in the "what exists" hint: enough to see the shape


def axis_text(value: Any) -> str:
    """An axis value as reports show it: scalars as they are, mappings and lists as canonical
    JSON, nothing for None."""
    if isinstance(value, dict | list):
        return canonical_json(value)
    if value is None:
        return ""
    return str(value)


def _spellings(value: Any) -> tuple[str, ...]:
    """Every way a selector may write `value`: as reports show it (`True`, `{"A":1}`) and as
    JSON (`true`, `{"A": 1}`)."""
    shown = axis_text(value)
    written = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return (shown,) if written == shown else (shown, written)


# a comma starts a new term only where `name=` or `name!=` follows: `mode=a,b` is one value
_TERM_SPLIT = re.compile(r",(?=\s*[^,=!]+!?=)")


@dataclass(frozen=True)
class Term:
    """One `axis=pattern` (or `axis!=pattern`) of a selector."""

    axis: str
    pattern: str
    negated: bool = False

    def matches(self, values: dict[str, tuple[str, ...]]) -> bool:
        """True when the item's value of `axis` matches (or, negated, does not)."""
        spellings = values.get(self.axis)
        hit = spellings is not None and any(fnmatchcase(v, self.pattern) for v in spellings)
        return hit != self.negated


def parse_selector(selector: str) -> list[Term] | None:
    """`"nccl=tuned,spec!=eagle*"` -> its terms; a selector without `=` (an id) -> None."""
    if "=" not in selector:
        return None
    terms: list[Term] = []
    for part in _TERM_SPLIT.split(selector):
        key, sep, value = part.partition("=")
        negated = key.endswith("!")
        key = key.removesuffix("!").strip()
        if not sep or not key:
            raise InputError(
                f"bad cell selector term {part!r}", hint="write axis=value,axis!=value,... "
            )
        terms.append(Term(key, value.strip(), negated))
    return terms


def _existing(values: Sequence[dict[str, tuple[str, ...]]]) -> str:
    """`commit=good|bad; host=a|b`: every axis and the values the items have."""
    seen: dict[str, list[str]] = {}
    for item in values:
        for k, spellings in item.items():
            if spellings[0] not in seen.setdefault(k, []):
                seen[k].append(spellings[0])
    parts = []
    for k in sorted(seen, key=lambda a: (a == "host", a)):
        shown = seen[k][:_SHOWN_VALUES]
        more = "|..." if len(seen[k]) > _SHOWN_VALUES else ""
        parts.append(f"{k}={'|'.join(shown)}{more}")
    return "; ".join(parts)


def select_cells(
    items: Sequence[T],
    selector: str | None,
    *,
    cell_id: Callable[[T], str],
    axes: Callable[[T], dict[str, Any]],
    host: Callable[[T], str],
) -> list[T]:
    """The items a selector picks; every item when it is None; InputError (exit 2) naming
    the axes and values that exist when it names an unknown axis or picks nothing."""
    if selector is None:
        return list(items)
    if not selector.strip():
        raise InputError(
            "an empty cell selector picks nothing", hint="leave --cells out to take every cell"
        )
    values = [{**{k: _spellings(v) for k, v in axes(i).items()}, "host": (host(i),)} for i in items]
    exist = _existing(values) or "no cells"
    terms = parse_selector(selector)
    if terms is None:
        ids = [cell_id(i) for i in items]
        glob = any(ch in selector for ch in _GLOB)
        picked = [
            i
            for i, cid in zip(items, ids, strict=True)
            if (fnmatchcase(cid, selector) if glob else cid.startswith(selector))
        ]
    else:
        known = set().union(*(v.keys() for v in values)) | {"host"}
        unknown = sorted({t.axis for t in terms} - known)
        if unknown:
            raise InputError(
                f"cell selector {selector!r} names unknown axis {unknown[0]!r}",
                hint=f"the cells have {exist}",
            )
        picked = [i for i, v in zip(items, values, strict=True) if all(t.matches(v) for t in terms)]
    if not picked:
        raise InputError(
            f"cell selector {selector!r} matches no cell", hint=f"the cells have {exist}"
        )
    return picked
