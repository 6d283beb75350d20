"""Cell selectors, one syntax for every command that picks cells (plan/apply --cells, bisect
--cell, audit --cells, replay): `axis=value,axis!=value,host=gpu*` (shell globs in values),
or a cell id prefix or glob."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, TypeVar

from orchestrator.errors import InputError

T = TypeVar("T")

_GLOB = frozenset("*?[")
_SHOWN_VALUES = 8  # per axis in the "what exists" hint: enough to see the shape


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


@dataclass(frozen=True)
class Term:
    """One `axis=pattern` (or `axis!=pattern`) of a selector."""

    axis: str
    pattern: str
    negated: bool = False

    def matches(self, values: dict[str, str]) -> bool:
        """True when the item's value of `axis` matches (or, negated, does not)."""
        value = values.get(self.axis)
        hit = value is not None and fnmatchcase(value, self.pattern)
        return hit != self.negated


def parse_selector(selector: str) -> list[Term] | None:
    """`"nccl=tuned,spec!=eagle*"` -> its terms; a selector without `=` (an id) -> None."""
    if "=" not in selector:
        return None
    terms: list[Term] = []
    for part in selector.split(","):
        key, sep, value = part.partition("=")
        negated = key.endswith("!")
        key = key.removesuffix("!").strip()
        if not sep or not key:
            raise InputError(
                f"bad cell selector term {part!r}", hint="write axis=value,axis!=value,... "
            )
        terms.append(Term(key, value.strip(), negated))
    return terms


def _existing(values: Sequence[dict[str, str]]) -> str:
    """`commit=good|bad; host=a|b`: every axis and the values the items have."""
    seen: dict[str, list[str]] = {}
    for item in values:
        for k, v in item.items():
            if v not in seen.setdefault(k, []):
                seen[k].append(v)
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
    if not selector:
        return list(items)
    values = [{**{k: _as_text(v) for k, v in axes(i).items()}, "host": host(i)} for i in items]
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
