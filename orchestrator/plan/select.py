"""Cell selectors for --cell/--cells: `axis=value,...` (host= too), or a cell id prefix."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from orchestrator.errors import InputError

T = TypeVar("T")


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def parse_selector(selector: str) -> dict[str, str] | None:
    """`"nccl=tuned,spec=eagle3-2"` -> {"nccl": "tuned", ...}; an id prefix -> None."""
    if "=" not in selector:
        return None
    terms: dict[str, str] = {}
    for part in selector.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise InputError(f"bad cell selector term {part!r}", hint="write axis=value,...")
        terms[key.strip()] = value.strip()
    return terms


def select_cells(
    items: Sequence[T],
    selector: str | None,
    *,
    cell_id: Callable[[T], str],
    axes: Callable[[T], dict[str, Any]],
    host: Callable[[T], str],
) -> list[T]:
    """The items a selector picks; every item when it is None; InputError when none match."""
    if not selector:
        return list(items)
    terms = parse_selector(selector)
    if terms is None:
        picked = [i for i in items if cell_id(i).startswith(selector)]
    else:
        known = set().union(*(axes(i).keys() for i in items)) | {"host"} if items else {"host"}
        unknown = sorted(set(terms) - known)
        if unknown:
            raise InputError(
                f"cell selector names unknown axis {unknown[0]!r}",
                hint=f"axes: {', '.join(sorted(known))}",
            )

        def matches(item: T) -> bool:
            values = {**{k: _as_text(v) for k, v in axes(item).items()}, "host": host(item)}
            return all(values.get(k) == v for k, v in terms.items())

        picked = [i for i in items if matches(i)]
    if not picked:
        raise InputError(
            f"cell selector {selector!r} matches no cell",
            hint="`orch plan` lists the cells and their axes",
        )
    return picked
