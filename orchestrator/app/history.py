"""The results history as services: index runs, read a metric's series with its change points,
and track a run that just finished against its history."""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

from orchestrator.analyze.history import History, Step, newest_steps, steps_of_many
from orchestrator.analyze.replication import recorded_spread
from orchestrator.errors import BundleError, InputError
from orchestrator.plan.select import select_cells
from orchestrator.results.documents import is_run_dir
from orchestrator.results.history.db import (
    HistoryDB,
    Point,
    Series,
    db_target,
    open_db,
    run_paths,
    series_of,
)
from orchestrator.results.history.index import Indexed, index_run
from orchestrator.results.layout import ARCHIVE_SUFFIXES, METRICS_JSON, is_archive_name
from orchestrator.results.read import open_run

_SINCE = re.compile(r"^(\d+(?:\.\d+)?)([dhm])$")


def _run_paths(results_dir: Path) -> list[Path]:
    """Run folders and packed runs under `results_dir`, by name."""
    if not results_dir.is_dir():
        return []
    return [
        p
        for p in sorted(results_dir.iterdir())
        if not p.name.startswith(".")
        and ((p.is_dir() and is_run_dir(p)) or (p.is_file() and is_archive_name(p.name)))
    ]


def _run_name(path: Path) -> str:
    """The run id a folder or packed run is named by."""
    for suffix in ARCHIVE_SUFFIXES:
        if path.name.endswith(suffix):
            return path.name.removesuffix(suffix)
    return path.name


def _index_into(conn: HistoryDB, refs: Sequence[str | Path], results_dir: Path) -> list[Indexed]:
    """Each run `refs` names into the history, verified: the one way a run enters it."""
    out = []
    for ref in refs:
        try:
            with open_run(ref, results_dir) as run:
                out.append(index_run(conn, run))
        except BundleError as exc:
            out.append(Indexed(str(ref), refused=exc.message))
    return out


def index_runs(results_dir: Path, refs: Sequence[str] = ()) -> list[Indexed]:
    """Index the runs `refs` names (every run under `results_dir` when none: those indexed
    already are said without opening them, so a long history costs a folder listing). Each
    new run is verified against its MANIFEST; a damaged one is refused with its reason and the
    others are indexed."""
    out = []
    with open_db(db_target(results_dir)) as conn:
        if refs:
            targets: list[str | Path] = list(refs)
        else:
            known = {row[0] for row in conn.execute("SELECT run_id FROM runs").fetchall()}
            targets = []
            for path in _run_paths(results_dir):
                if _run_name(path) in known:
                    out.append(Indexed(_run_name(path), skipped="indexed already"))
                else:
                    targets.append(path)
        out += _index_into(conn, targets, results_dir)
    return out


def parse_since(text: str | None) -> float | None:
    """`30d`, `12h`, `90m` -> the epoch seconds that long ago (None: all)."""
    if not text:
        return None
    units = {"d": 86400, "h": 3600, "m": 60}
    found = _SINCE.match(text.strip())
    if found is None or float(found.group(1)) <= 0:
        raise InputError(
            f"--since {text!r}: write a positive span: 30d, 12h or 90m", key_path="--since"
        )
    return time.time() - float(found.group(1)) * units[found.group(2)]


def _located(runs: dict[str, str], results_dir: Path) -> dict[str, str]:
    """Each run's folder as it is now: the stored one when it exists, else the run's name under
    `results_dir` (a history indexed elsewhere, or a results folder that moved), absolute."""
    out = {}
    for run_id, stored in runs.items():
        where = Path(stored)
        if not where.exists():
            for candidate in [where.name, *(run_id + suffix for suffix in ("", *ARCHIVE_SUFFIXES))]:
                if candidate and (results_dir / candidate).exists():
                    where = results_dir / candidate
                    break
        out[run_id] = os.path.abspath(where)
    return out


def _undated_note(undated: list[Point]) -> list[str]:
    if not undated:
        return []
    runs = sorted({p.run_id for p in undated})
    shown = ", ".join(runs[:3]) + (f" and {len(runs) - 3} more" if len(runs) > 3 else "")
    return [
        f"{len(runs)} run(s) have no readable commit date and are left out of --by commit "
        f"({shown}); --by time shows them"
    ]


def history(
    results_dir: Path,
    metric: str,
    *,
    playbook: str | None = None,
    since: str | None = None,
    by: str = "time",
    min_change: float = 0.03,
    selector: str | None = None,
) -> History:
    """Every series of `metric` (of `playbook`, those `selector` picks by their axes and host,
    as `--cells` picks cells), in order, with its change points. A metric no run reports is
    refused with the metrics the history holds."""
    if not (math.isfinite(min_change) and 0 <= min_change < 1):
        raise InputError(
            f"--min-change {min_change}: a fraction from 0 to 1 (0.03 is 3 %)",
            key_path="--min-change",
        )
    starting = parse_since(since)
    undated: list[Point] = []
    with open_db(db_target(results_dir)) as conn:
        found = series_of(conn, metric, playbook=playbook, since=starting, by=by, undated=undated)
        if not found:
            _check_metric(conn, metric)
        runs = _located(run_paths(conn), results_dir)
        identities = {
            key: json.loads(text)
            for key, text in conn.execute("SELECT series, identity FROM series").fetchall()
        }
    if selector is not None:
        found = select_cells(
            found,
            selector,
            cell_id=lambda s: s.series,
            axes=lambda s: dict(identities.get(s.series, {}).get("axes") or {}),
            host=lambda s: str(s.host or ""),
        )
    steps, tests = steps_of_many(found, metric, min_change=min_change)
    return History(metric, found, steps, runs, tests, notes=tuple(_undated_note(undated)))


def _check_metric(conn: HistoryDB, metric: str) -> None:
    """Refuse a metric no indexed run reports, naming those some do."""
    known = sorted(str(r[0]) for r in conn.execute("SELECT DISTINCT metric FROM metrics"))
    if known and metric not in known:
        raise InputError(
            f"-m {metric!r}: no run in the history reports it",
            key_path="--metric",
            hint="the history holds: " + ", ".join(known),
        )


# Runs of a series looked back through for a measured between-start spread (newest first).
SPREAD_LOOKBACK = 30
SPREAD_NOT_MEASURED = (
    "start-to-start spread not measured for {count} of {total} configuration(s): their test "
    "takes the runs' own spread (a run with bench.starts: 2 or more measures it)"
)


def measured_start_sd(series: Series, runs: dict[str, str], metric: str) -> float | None:
    """The between-start sd (log scale) of `metric` that the newest run of `series` with
    `bench.starts` > 1 recorded (its metrics.json's `starts`); None where none did."""
    for point in reversed(series.points[-SPREAD_LOOKBACK:]):
        path = Path(runs.get(point.run_id, "")) / point.path / METRICS_JSON
        if point.run_id not in runs or not path.is_file():
            continue
        try:
            spread = recorded_spread(json.loads(path.read_text()), metric)
        except (OSError, ValueError):
            continue
        if spread is not None and spread.between_sd is not None and spread.starts > 1:
            return spread.between_sd
    return None


def track(
    results_dir: Path, run_dir: Path, metric: str, *, min_change: float = 0.03
) -> tuple[list[Step], dict[str, str], list[str]]:
    """Index the run just finished (verified, as `orch index` does), then the regressions it
    raises (analyze/history.py's newest_steps: a new level among the newest runs, once, across
    the run's series, each test widened by its configuration's measured between-start sd),
    and the notes to say once (the configurations whose spread is not measured). A run the
    history refuses is an error (BundleError)."""
    with open_run(run_dir) as run, open_db(db_target(results_dir)) as conn:
        (done,) = _index_into(conn, [run_dir], results_dir)
        if done.refused:
            raise BundleError(f"{run.run_id}: not indexed: {done.refused}")
        keys = [r[0] for r in conn.execute(
            "SELECT DISTINCT series FROM cells WHERE run_id = ?", (run.run_id,))]  # fmt: skip
        found = series_of(conn, metric, series_ids=keys)
        runs = _located(run_paths(conn), results_dir)
        spans = {
            (r[0], r[1]): (r[2], r[3])
            for r in conn.execute(  # each run's repeats' range
                "SELECT c.series, c.run_id, m.vmin, m.vmax FROM metrics m JOIN cells c ON "
                "c.run_id = m.run_id AND c.cell_id = m.cell_id WHERE m.metric = ?",
                (metric,),
            )
        }
    measured = {s.series: measured_start_sd(s, runs, metric) for s in found}
    start_sds = {k: v for k, v in measured.items() if v is not None}
    notes = []
    if len(start_sds) < len(found):
        count = len(found) - len(start_sds)
        notes.append(SPREAD_NOT_MEASURED.format(count=count, total=len(found)))
    steps = newest_steps(found, run.run_id, metric, min_change=min_change, spans=spans,
                         start_sds=start_sds)  # fmt: skip
    return [s for s in steps if s.regression], runs, notes
