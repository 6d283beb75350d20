"""Bundles into the history database: one row per run, per cell (with its series and commit)
and per cell metric (median, repeats, spread, unit).

A series is one configuration followed across commits: the cell as recorded less what names the
commit (the repo's version and the axes that only chose it), how long it measured (repeats,
warmup, timeouts) and what only observes (snapshots, telemetry, preflight, profile), on one host,
under one playbook name. Indexing is idempotent (a run indexed is skipped) and refuses a damaged
bundle with the manifest's reason.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import BundleError
from orchestrator.results.documents import read_json
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
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def index_run(conn: HistoryDB, run: RunBundle, *, verify: bool = True) -> Indexed:
    """Add one run to the history (nothing when it is there already)."""
    run_id = run.run_id
    if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
        return Indexed(run_id, skipped="indexed already")
    doc = run.run or {}
    if doc.get("status") == "running" or not run.finalized:
        return Indexed(run_id, skipped="not finished (no manifest yet)")
    if verify:
        report = run.verify()
        if not report.ok:
            what = report.mismatched[:1] or report.missing[:1] or report.extra[:1]
            return Indexed(run_id, refused=f"does not match its manifest ({what[0]})")
    playbook = str(doc.get("playbook") or "")
    cells = 0
    with conn.transaction():
        conn.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run_id, str(run.source), playbook, doc.get("started"), doc.get("finished"),
             doc.get("status"), time.strftime("%Y-%m-%dT%H:%M:%S%z")),
        )  # fmt: skip
        for record in run.cells.values():
            try:
                cell_json = _dict(read_json(record.path / CELL_JSON))
                metrics = _dict(read_json(record.path / METRICS_JSON))
                repo = _dict(read_json(record.path / REPO_JSON))
            except BundleError:
                continue  # a damaged cell loses its row, not the run's
            cell = _dict(cell_json.get("cell"))
            host = str(cell.get("host") or "")
            identity = series_identity(cell)
            key = series_key(playbook, host, identity)
            conn.execute(
                "INSERT INTO series VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (key, playbook, host, series_label(playbook, host, identity),
                 json.dumps(identity, sort_keys=True, default=str)),
            )  # fmt: skip
            pin = _dict(cell.get("repo"))
            conn.execute(
                "INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, record.id, key, repo.get("sha") or pin.get("version"),
                 repo.get("commit_date"), pin.get("requested"), cell_json.get("status"),
                 _float(cell_json.get("started")), run.relative(record.path)),
            )  # fmt: skip
            units, summary = _dict(metrics.get("units")), _dict(metrics.get("summary"))
            for name, s in summary.items():
                if not isinstance(s, dict) or _float(s.get("median")) is None:
                    continue
                conn.execute(
                    "INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, record.id, str(name), units.get(name), _float(s.get("median")),
                     int(s.get("n") or 0), _float(s.get("stdev")), _float(s.get("min")),
                     _float(s.get("max"))),
                )  # fmt: skip
            cells += 1
    return Indexed(run_id, cells=cells)
