"""Measured error rates of every orch verdict, against the rates they state.

    .venv/bin/python bench/verdict_accuracy.py [--quick] [--seed 0] [--only NAME ...] [--json]

Each module in bench/verdicts/ runs seeded simulations that call orch's own functions (diff,
audit, investigate, bisect, the nightly watch, the start-level comparison) under start-to-start
spread (0, 1, 2 %), slow outliers (20 % of repeats), drift and bimodal repeats, and returns one
row per verdict and condition: trials, the stated rate, the measured rate with its 95 % Wilson
range (the simulation's own error), and the seconds it spent. A row whose measured rate lies
above its stated rate beyond the simulation error is marked `OVER`. Nothing is asserted here:
the tests prove the rules; this prints the figures the README quotes.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import pkgutil
import sys
import time
from pathlib import Path
from typing import Any

from tabulate import tabulate

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def wilson(rate: float, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score range of a rate measured over `trials` trials."""
    if trials <= 0:
        return (0.0, 1.0)
    centre = (rate + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials))
    half /= 1 + z * z / trials
    return (max(0.0, centre - half), min(1.0, centre + half))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def mark(row: dict[str, Any]) -> str:
    """`OVER` where the measured rate exceeds the stated one beyond the simulation's error."""
    stated, measured = _number(row.get("stated_rate")), _number(row.get("measured_rate"))
    trials = int(row.get("trials") or 0)
    if stated is None or measured is None or trials <= 0 or math.isnan(stated + measured):
        return ""  # a power row, or nothing measured: no stated rate to hold
    low, _ = wilson(measured, trials)
    return "OVER" if low > stated else "ok"


def modules(only: list[str]) -> list[str]:
    """The verdict modules in bench/verdicts/, or those named."""
    names = sorted(m.name for m in pkgutil.iter_modules([str(HERE / "verdicts")]))
    return [n for n in names if not only or n in only]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials (a smoke run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", default=[], help="module names in bench/verdicts/")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    every: list[dict[str, Any]] = []
    for name in modules(args.only):
        module = importlib.import_module(f"verdicts.{name}")
        started = time.perf_counter()
        rows = module.rows(seed=args.seed, quick=args.quick)
        spent = time.perf_counter() - started
        for row in rows:
            row.setdefault("seconds", round(spent / max(1, len(rows)), 2))
            row["module"] = name
            row["check"] = mark(row)
            every.append(row)
    if args.json:
        print(json.dumps(every, indent=2, default=str))
        return 0
    table = []
    for row in every:
        measured = _number(row.get("measured_rate"))
        trials = int(row.get("trials") or 0)
        low, high = wilson(measured, trials) if measured is not None else (None, None)
        table.append(
            [
                row["module"],
                row.get("verdict", ""),
                row.get("condition", ""),
                trials,
                row.get("stated_rate", ""),
                "" if measured is None else f"{measured:.3f}",
                "" if low is None else f"[{low:.3f}, {high:.3f}]",
                row.get("seconds", ""),
                row["check"],
            ]
        )
    headers = [
        "module",
        "verdict",
        "condition",
        "trials",
        "stated",
        "measured",
        "95% range",
        "s",
        "",
    ]
    print(tabulate(table, headers=headers))
    print(
        "\nRows marked 'as before', 'not modelled (--starts 1)', 'repeats as independent', 'told\n"
        "nothing' or '1 start(s)' show what a rule that counts the repeats of one start gives\n"
        "under a start-to-start spread: they are expected OVER, and are why orch now counts\n"
        "starts. 'one commit's call in the search' is bisect's per-commit call, which the\n"
        "confirmation bounds (its own row). docs/VERDICTS.md reads the table."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
