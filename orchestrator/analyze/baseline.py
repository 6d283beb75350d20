"""Which cell each cell of a report is compared with (`orch report --baseline SELECTOR`).

The selector is the one every command uses (`plan/select.py`). `commit=good` compares each cell
with the cell at commit=good that has the same value of every other axis (and, where there are
several, the same host); a cell id (or prefix) compares every cell with that one cell.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from orchestrator.analyze.evidence import CellEvidence
from orchestrator.errors import InputError
from orchestrator.plan.select import parse_selector, select_cells

_SHOWN = 6  # configurations named in an ambiguity error


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def configuration(cell: CellEvidence) -> str:
    """`commit=good,nccl=tuned`: the cell's axes as a selector would name them."""
    return ",".join(f"{k}={_text(v)}" for k, v in cell.axes.items()) or cell.id


def _one(cell: CellEvidence, candidates: list[CellEvidence]) -> CellEvidence:
    same_host = [c for c in candidates if c.host == cell.host]
    return (same_host or candidates)[0]


def _ambiguous(selector: str, picked: Sequence[CellEvidence], where: str) -> InputError:
    configs = list(dict.fromkeys(configuration(c) for c in picked))
    shown = "; ".join(configs[:_SHOWN]) + ("; ..." if len(configs) > _SHOWN else "")
    return InputError(
        f"baseline {selector!r} matches {len(configs)} configurations{where}: {shown}",
        key_path="--baseline",
        hint=f"name one configuration: add the axes that differ, e.g. --baseline '{configs[0]}'",
    )


def baseline_cells(cells: Sequence[CellEvidence], selector: str) -> dict[str, str | None]:
    """{cell id: the id of the cell it is compared with, or None when there is none}.

    InputError (exit 2) when the selector matches no cell (listing the axes and values that
    exist), or several configurations for one cell (listing them).
    """
    try:
        picked = select_cells(
            cells,
            selector,
            cell_id=lambda c: c.id,
            axes=lambda c: c.axes,
            host=lambda c: c.host or "",
        )
    except InputError as exc:
        raise InputError(
            exc.message.replace("cell selector", "baseline", 1),
            key_path="--baseline",
            hint=exc.hint,
        ) from None
    terms = parse_selector(selector)
    if terms is None:  # a cell id: one cell for everyone
        if len({configuration(c) for c in picked}) > 1:
            raise _ambiguous(selector, picked, "")
        return {c.id: _one(c, picked).id for c in cells}
    named = {t.axis for t in terms}
    out: dict[str, str | None] = {}
    for cell in cells:
        held = [a for a in cell.axes if a not in named]
        candidates = [
            p for p in picked if all(_text(p.axes.get(a)) == _text(cell.axes.get(a)) for a in held)
        ]
        if len({configuration(c) for c in candidates}) > 1:
            raise _ambiguous(selector, candidates, f" for cell {cell.id}")
        out[cell.id] = _one(cell, candidates).id if candidates else None
    return out
