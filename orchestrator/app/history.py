"""The results history as services: index runs, read a metric's series with its change points,
and track a run that just finished against its history."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from orchestrator.analyze.history import History, Step, newest_steps, steps_of_many
from orchestrator.errors import BundleError, InputError
from orchestrator.plan.select import select_cells
from orchestrator.results.documents import is_run_dir
from orchestrator.results.history.db import db_target, open_db, run_paths, series_of
from orchestrator.results.history.index import Indexed, index_run
from orchestrator.results.layout import ARCHIVE_SUFFIXES, is_archive_name
from orchestrator.results.read import open_run


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


def index_runs(
    results_dir: Path, refs: Sequence[str] = (), *, verify: bool = True
) -> list[Indexed]:
    """Index the runs `refs` names (every run under `results_dir` when none: those indexed
    already are said without opening them, so a long history costs a folder listing)."""
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
        for ref in targets:
            try:
                with open_run(ref, results_dir) as run:
                    out.append(index_run(conn, run, verify=verify))
            except BundleError as exc:
                out.append(Indexed(str(ref), refused=exc.message))
    return out


def parse_since(text: str | None) -> float | None:
    """`30d`, `12h`, `90m` -> the epoch seconds that long ago (None: all)."""
    if not text:
        return None
    units = {"d": 86400, "h": 3600, "m": 60}
    try:
        return time.time() - float(text[:-1]) * units[text[-1]]
    except (KeyError, ValueError):
        raise InputError(f"--since {text!r}: write 30d, 12h or 90m", key_path="--since") from None


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
    as `--cells` picks cells), in order, with its change points."""
    with open_db(db_target(results_dir)) as conn:
        found = series_of(conn, metric, playbook=playbook, since=parse_since(since), by=by)
        runs = run_paths(conn)
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
    return History(metric, found, steps, runs, tests)


def track(
    results_dir: Path, run_dir: Path, metric: str, *, min_change: float = 0.03
) -> tuple[list[Step], dict[str, str]]:
    """Index the run just finished, then the regressions it raises (analyze/history.py's
    newest_steps: a new level among the newest runs, once, across the run's series)."""
    with open_run(run_dir) as run, open_db(db_target(results_dir)) as conn:
        index_run(conn, run, verify=False)
        keys = [r[0] for r in conn.execute(
            "SELECT DISTINCT series FROM cells WHERE run_id = ?", (run.run_id,))]  # fmt: skip
        found = series_of(conn, metric, series_ids=keys)
        runs = run_paths(conn)
        spans = {
            (r[0], r[1]): (r[2], r[3])
            for r in conn.execute(  # each run's repeats' range
                "SELECT c.series, c.run_id, m.vmin, m.vmax FROM metrics m JOIN cells c ON "
                "c.run_id = m.run_id AND c.cell_id = m.cell_id WHERE m.metric = ?",
                (metric,),
            )
        }
    steps = newest_steps(found, run.run_id, metric, min_change=min_change, spans=spans)
    return [s for s in steps if s.regression], runs
