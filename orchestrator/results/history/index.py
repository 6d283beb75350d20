"""Bundles into the history database: one row per run, per cell (with its series and commit)
and per cell metric (median, repeats, spread, unit).

A series is one configuration followed across commits: the cell as recorded less what names the
commit (the repo's version and the axes that only chose it), how long it measured (repeats,
warmup, timeouts) and what only observes (snapshots, telemetry, preflight, profile), on one host,
under one playbook name. Indexing is idempotent (a run indexed is skipped), always checks the
bundle against its MANIFEST, and refuses a damaged bundle (or another run under an indexed run's
id) with the reason, writing nothing of it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import BundleError
from orchestrator.results.documents import read_json
from orchestrator.results.history.capacity import capacity_rows
from orchestrator.results.history.db import HistoryDB
from orchestrator.results.layout import CELL_JSON, METRICS_JSON, REPO_JSON
from orchestrator.results.read import RunBundle

_OBSERVING = ("id", "snapshot", "telemetry", "preflight", "profile", "schema_version", "host")
_HOW_LONG = ("repeats", "warmup", "timeout", "settle")


@dataclass(frozen=True)
class Indexed:
    """What indexing one run did: `cells` indexed, or why it was skipped or refused."""

    run_id: str
    cells: int = 0
    skipped: str | None = None
    refused: str | None = None


def series_identity(cell: Mapping[str, Any]) -> dict[str, Any]:
    """The cell less its commit, its measuring length and what only observes."""
    data = {k: v for k, v in cell.items() if k not in _OBSERVING}
    repo = data.get("repo")
    requested = repo.get("requested") if isinstance(repo, Mapping) else None
    if isinstance(repo, Mapping):
        data["repo"] = {
            k: v
            for k, v in repo.items()
            if k not in ("version", "requested", "resolved_at", "resolved_by")
        }
    axes = data.get("axes")
    if isinstance(axes, Mapping):
        data["axes"] = {k: v for k, v in axes.items() if requested is None or v != requested}
    bench = data.get("bench")
    if isinstance(bench, Mapping):
        data["bench"] = {k: v for k, v in bench.items() if k not in _HOW_LONG}
    data.pop("cell_timeout", None)
    return data


def series_key(playbook: str, host: str, identity: Mapping[str, Any]) -> str:
    """A stable id of one series (a hash of playbook, host and identity)."""
    text = json.dumps([playbook, host, identity], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def series_label(playbook: str, host: str, identity: Mapping[str, Any]) -> str:
    """`demo nccl=tuned spec=eagle3-2 @localhost`: what a person reads a series by."""
    axes = identity.get("axes") if isinstance(identity.get("axes"), Mapping) else {}
    said = " ".join(f"{k}={v}" for k, v in (axes or {}).items())
    return f"{playbook} {said} @{host}".replace("  ", " ")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _float(value: Any) -> float | None:
    """A finite number, else None (for what only informs: spread, range, start time)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _text(value: Any) -> str | None:
    """A recorded string as the database holds it (None stays None, anything else as text)."""
    return None if value is None else value if isinstance(value, str) else json.dumps(value)


def _count(value: Any) -> int | None:
    """A number of repeats: a whole number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if math.isfinite(value) and value == int(value) and value >= 0 else None


@dataclass(frozen=True)
class _CellRows:
    """One cell's rows, read and checked before anything is written."""

    series: tuple[Any, ...]
    cell: tuple[Any, ...]
    metrics: list[tuple[Any, ...]]


def _cell_rows(run: RunBundle, record: Any, playbook: str) -> _CellRows:
    """A cell's rows; BundleError (the file and why) when a file cannot be read or holds what
    no measurement writes: a median that is not a finite number, a repeat count that is not
    a count. The run is refused then, not half indexed: a repaired bundle is indexed later."""
    cell_json = _dict(read_json(record.path / CELL_JSON))
    metrics = _dict(read_json(record.path / METRICS_JSON))
    repo = _dict(read_json(record.path / REPO_JSON))
    where = f"{run.source}: {run.relative(record.path / METRICS_JSON)}"
    cell = _dict(cell_json.get("cell"))
    host = str(cell.get("host") or "")
    identity = series_identity(cell)
    key = series_key(playbook, host, identity)
    pin = _dict(cell.get("repo"))
    units, summary = _dict(metrics.get("units")), _dict(metrics.get("summary"))
    rows = []
    for name, s in summary.items():
        if not isinstance(s, dict) or s.get("median") is None:
            continue
        median, n = s.get("median"), s.get("n")
        if isinstance(median, bool) or not isinstance(median, int | float):
            raise BundleError(f"{where}: {name}: the median {median!r} is not a number")
        if not math.isfinite(median):
            raise BundleError(f"{where}: {name}: the median {median!r} is not a finite number")
        if n is not None and _count(n) is None:
            raise BundleError(f"{where}: {name}: the repeat count n {n!r} is not a count")
        rows.append(
            (run.run_id, record.id, str(name), _text(units.get(name)), float(median),
             _count(n) or 0, _float(s.get("stdev")), _float(s.get("min")),
             _float(s.get("max")))
        )  # fmt: skip
    return _CellRows(
        (key, playbook, host, series_label(playbook, host, identity),
         json.dumps(identity, sort_keys=True, default=str)),
        (run.run_id, record.id, key, _text(repo.get("sha") or pin.get("version")),
         _text(repo.get("commit_date")), _text(pin.get("requested")),
         _text(cell_json.get("status")), _float(cell_json.get("started")),
         run.relative(record.path)),
        rows,
    )  # fmt: skip


def run_location(run: RunBundle) -> str:
    """Where a run is, as the history stores it: absolute, so its commands and links work from
    any folder."""
    return os.path.abspath(run.source)


def _known(conn: HistoryDB, run: RunBundle, row: Sequence[Any]) -> Indexed:
    """A run whose id the history holds: the same run (maybe moved: its path is updated), or
    another run under the same id, refused (one would take the other's place)."""
    stored, playbook, started, finished = row
    doc = run.run or {}
    mine = (str(doc.get("playbook") or ""), _text(doc.get("started")), _text(doc.get("finished")))
    if (playbook or "", started, finished) != mine:
        return Indexed(
            run.run_id,
            refused=f"{run.source}: run id {run.run_id!r} is indexed already for another run "
            f"({stored}, started {started}): a run id names one run",
        )
    here = run_location(run)
    if stored != here and not Path(stored).exists():
        with conn.transaction():
            conn.execute("UPDATE runs SET path = ? WHERE run_id = ?", (here, run.run_id))
        return Indexed(run.run_id, skipped="indexed already (moved: its folder is updated)")
    return Indexed(run.run_id, skipped="indexed already")


def index_run(conn: HistoryDB, run: RunBundle) -> Indexed:
    """Add one run to the history (nothing when it is there already). Always verified against
    its MANIFEST first; a damaged cell refuses the whole run, with the file and the reason."""
    run_id = run.run_id
    row = conn.execute(
        "SELECT path, playbook, started, finished FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    if row:
        return _known(conn, run, row)
    doc = run.run or {}
    if doc.get("status") == "running" or not run.finalized:
        return Indexed(run_id, skipped="not finished (no manifest yet)")
    report = run.verify()
    if not report.ok:
        what = report.mismatched[:1] or report.missing[:1] or report.extra[:1]
        return Indexed(run_id, refused=f"does not match its manifest ({what[0]})")
    playbook = str(doc.get("playbook") or "")
    try:
        cells = [_cell_rows(run, record, playbook) for record in run.cells.values()]
    except BundleError as exc:
        return Indexed(run_id, refused=exc.message)
    slo = capacity_rows(run_id, ((r.id, r.path) for r in run.cells.values()))  # SLO searches
    with conn.transaction():
        added = conn.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
            (run_id, run_location(run), playbook, _text(doc.get("started")),
             _text(doc.get("finished")), _text(doc.get("status")),
             time.strftime("%Y-%m-%dT%H:%M:%S%z")),
        )  # fmt: skip
        if added.rowcount == 0:  # another orch indexed it since we looked: its rows stand
            return Indexed(run_id, skipped="indexed already (by another orch just now)")
        for rows in cells:
            conn.execute(
                "INSERT INTO series VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", rows.series
            )
            conn.execute("INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows.cell)
            conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows.metrics)
        conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", slo)
    return Indexed(run_id, cells=len(cells))
