"""The history database: where it lives, its schema and migrations, and the queries on it.

SQLite (stdlib), one file beside the results (`<results>/history.sqlite`, or `ORCH_DB`), made
on first use. The schema version is kept in `meta` and checked on open: a database written by a
newer orch is refused rather than read wrong, an older one is migrated in one transaction.
Bundles stay the truth: everything here can be rebuilt with `orch index`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import BundleError, InputError

DB_FILE = "history.sqlite"
SCHEMA_VERSION = 1
# Each step takes the schema from the version before it to its own; never edit a shipped step.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            "CREATE TABLE runs (run_id TEXT PRIMARY KEY, path TEXT NOT NULL, playbook TEXT, "
            "started TEXT, finished TEXT, status TEXT, indexed_at TEXT NOT NULL)",
            "CREATE TABLE series (series TEXT PRIMARY KEY, playbook TEXT, host TEXT, "
            "label TEXT NOT NULL, identity TEXT NOT NULL)",
            "CREATE TABLE cells (run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, "
            "cell_id TEXT NOT NULL, series TEXT NOT NULL REFERENCES series(series), "
            "commit_sha TEXT, commit_date TEXT, requested TEXT, status TEXT, started REAL, "
            "path TEXT NOT NULL, PRIMARY KEY (run_id, cell_id))",
            "CREATE INDEX cells_by_series ON cells(series, started)",
            "CREATE TABLE metrics (run_id TEXT NOT NULL, cell_id TEXT NOT NULL, "
            "metric TEXT NOT NULL, unit TEXT, median REAL, n INTEGER, stdev REAL, vmin REAL, "
            "vmax REAL, PRIMARY KEY (run_id, cell_id, metric), "
            "FOREIGN KEY (run_id, cell_id) REFERENCES cells(run_id, cell_id) ON DELETE CASCADE)",
        ),
    ),
)


def db_path(results_dir: Path, environ: dict[str, str] | None = None) -> Path:
    """`ORCH_DB` (a path, or sqlite:///path), else history.sqlite in the results folder."""
    given = (os.environ if environ is None else environ).get("ORCH_DB", "").strip()
    if not given:
        return results_dir / DB_FILE
    if given.startswith(("postgresql://", "postgres://")):
        raise InputError(
            "ORCH_DB names a PostgreSQL server: this orch keeps its history in SQLite only",
            key_path="ORCH_DB",
            hint="unset ORCH_DB (the history is then results/history.sqlite) or give a file path",
        )
    return Path(given.removeprefix("sqlite:///").removeprefix("sqlite://"))


def _version(conn: sqlite3.Connection) -> int:
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


@contextmanager
def open_db(path: Path) -> Iterator[sqlite3.Connection]:
    """The database at `path`, made or migrated to this orch's schema; committed on success."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=30)
    except (OSError, sqlite3.Error) as exc:
        raise BundleError(f"{path}: cannot open the history database: {exc}") from None
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        version = _version(conn)
        if version > SCHEMA_VERSION:
            raise BundleError(
                f"{path}: history schema {version} was written by a newer orch "
                f"(this one reads up to {SCHEMA_VERSION})",
                hint="use the newer orch, or rebuild a copy with `orch index`",
            )
        with conn:
            for step, statements in MIGRATIONS:
                if step > version:
                    for sql in statements:
                        conn.execute(sql)
                    conn.execute(
                        "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(step),)
                    )
        yield conn
        conn.commit()
    except sqlite3.DatabaseError as exc:
        raise BundleError(
            f"{path}: the history database is damaged: {exc}",
            hint="move it aside; `orch index` rebuilds it from the bundles",
        ) from None
    finally:
        conn.close()


@dataclass(frozen=True)
class Point:
    """One run of one series: the cell, its commit, the metric's median and repeats."""

    run_id: str
    cell_id: str
    started: float | None
    commit_sha: str | None
    commit_date: str | None
    requested: str | None
    status: str | None
    path: str
    median: float
    n: int
    unit: str | None


@dataclass(frozen=True)
class Series:
    """One configuration over runs: its id, label and points in order."""

    series: str
    label: str
    playbook: str | None
    host: str | None
    points: list[Point]


def series_of(
    conn: sqlite3.Connection,
    metric: str,
    *,
    playbook: str | None = None,
    series_ids: Sequence[str] | None = None,
    since: float | None = None,
    by: str = "time",
) -> list[Series]:
    """Every series with `metric` (of `playbook`, or the given ids), points ordered by run time
    or by commit date (`by="commit"`); passed and failed cells alike (a failed one has no
    median unless it measured)."""
    where, args = ["m.metric = ?", "m.median IS NOT NULL"], [metric]
    if playbook is not None:
        where.append("s.playbook = ?")
        args.append(playbook)
    if since is not None:
        where.append("c.started >= ?")
        args.append(since)  # type: ignore[arg-type]
    if series_ids is not None:
        where.append(f"s.series IN ({','.join('?' * len(series_ids))})")
        args += list(series_ids)
    order = "c.commit_date, c.started" if by == "commit" else "c.started"
    rows = conn.execute(
        "SELECT s.series, s.label, s.playbook, s.host, c.run_id, c.cell_id, c.started, "
        "c.commit_sha, c.commit_date, c.requested, c.status, c.path, m.median, m.n, m.unit "
        "FROM metrics m JOIN cells c ON c.run_id = m.run_id AND c.cell_id = m.cell_id "
        f"JOIN series s ON s.series = c.series WHERE {' AND '.join(where)} "
        f"ORDER BY s.label, {order}",
        args,
    ).fetchall()
    out: dict[str, Series] = {}
    for r in rows:
        found = out.setdefault(r[0], Series(r[0], r[1], r[2], r[3], []))
        found.points.append(
            Point(
                r[4],
                r[5],
                r[6],
                r[7],
                r[8],
                r[9],
                r[10],
                r[11],
                float(r[12]),
                int(r[13] or 0),
                r[14],
            )
        )
    return list(out.values())
