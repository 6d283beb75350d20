"""The history database: where it lives, its schema and migrations, and the queries on it.

SQLite (stdlib) by default: one file beside the results (`<results>/history.sqlite`), made on
first use. `ORCH_DB` names another file, or a PostgreSQL server a team shares
(`postgresql://...`, through psycopg 3: `pip install 'orch[postgres]'`), with the same schema
and migrations: the SQL here is written once, in the subset both speak (`?` placeholders are
PostgreSQL's `%s` there). The schema version is kept in `meta` and checked on open: a database
written by a newer orch is refused rather than read wrong, an older one is migrated in one
transaction. Bundles stay the truth: everything here can be rebuilt with `orch index`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
            "commit_sha TEXT, commit_date TEXT, requested TEXT, status TEXT, "
            "started DOUBLE PRECISION, path TEXT NOT NULL, PRIMARY KEY (run_id, cell_id))",
            "CREATE INDEX cells_by_series ON cells(series, started)",
            "CREATE TABLE metrics (run_id TEXT NOT NULL, cell_id TEXT NOT NULL, "
            "metric TEXT NOT NULL, unit TEXT, median DOUBLE PRECISION, n INTEGER, "
            "stdev DOUBLE PRECISION, vmin DOUBLE PRECISION, vmax DOUBLE PRECISION, "
            "PRIMARY KEY (run_id, cell_id, metric), "
            "FOREIGN KEY (run_id, cell_id) REFERENCES cells(run_id, cell_id) ON DELETE CASCADE)",
        ),
    ),
)
POSTGRES_SCHEMES = ("postgresql://", "postgres://")

Target = Path | str  # a SQLite file, or a PostgreSQL URL


def db_target(results_dir: Path, environ: dict[str, str] | None = None) -> Target:
    """`ORCH_DB` (a PostgreSQL URL, a path, or sqlite:///path), else history.sqlite in the
    results folder."""
    given = (os.environ if environ is None else environ).get("ORCH_DB", "").strip()
    if not given:
        return results_dir / DB_FILE
    if given.startswith(POSTGRES_SCHEMES):
        return given
    return Path(given.removeprefix("sqlite:///").removeprefix("sqlite://"))


def shown(target: Target) -> str:
    """The target as an error says it: a URL without its password."""
    if isinstance(target, Path):
        return str(target)
    scheme, _, rest = target.partition("://")
    who, at, where = rest.rpartition("@")
    return f"{scheme}://{who.split(':')[0] + '@' if at else ''}{where}"


class HistoryDB:
    """One open history: SQLite or PostgreSQL behind the calls orch makes (SQL with `?`)."""

    def __init__(self, conn: Any, *, postgres: bool) -> None:
        self.conn = conn
        self.postgres = postgres

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.postgres else sql

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """Run one statement; its cursor (fetchone, fetchall, iteration)."""
        return self.conn.execute(self._sql(sql), tuple(args))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each row."""
        if self.postgres:
            with self.conn.cursor() as cur:
                cur.executemany(self._sql(sql), rows)
        else:
            self.conn.executemany(sql, rows)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing."""
        if self.postgres:
            with self.conn.transaction():
                yield
        else:
            with self.conn:
                yield


def _driver_errors() -> tuple[type[BaseException], ...]:
    try:
        import psycopg
    except ImportError:
        return (sqlite3.Error,)
    return (sqlite3.Error, psycopg.Error)


def _connect(target: Target) -> HistoryDB:
    if isinstance(target, Path):
        target.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(target, timeout=30)
        conn.execute("PRAGMA foreign_keys = ON")
        return HistoryDB(conn, postgres=False)
    try:
        import psycopg
    except ImportError:
        raise InputError(
            "ORCH_DB names a PostgreSQL server, and psycopg 3 is not installed",
            key_path="ORCH_DB",
            hint="pip install 'orch[postgres]' (or unset ORCH_DB: results/history.sqlite)",
        ) from None
    return HistoryDB(psycopg.connect(target, autocommit=True, connect_timeout=10), postgres=True)


def _version(db: HistoryDB) -> int:
    db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


@contextmanager
def open_db(target: Target) -> Iterator[HistoryDB]:
    """The history at `target`, made or migrated to this orch's schema; committed on success."""
    errors = _driver_errors()
    opening: tuple[type[BaseException], ...] = (OSError, *errors)
    try:
        db = _connect(target)
    except opening as exc:
        raise BundleError(f"{shown(target)}: cannot open the history database: {exc}") from None
    try:
        version = _version(db)
        if version > SCHEMA_VERSION:
            raise BundleError(
                f"{shown(target)}: history schema {version} was written by a newer orch "
                f"(this one reads up to {SCHEMA_VERSION})",
                hint="use the newer orch, or rebuild a copy with `orch index`",
            )
        with db.transaction():
            for step, statements in MIGRATIONS:
                if step > version:
                    for sql in statements:
                        db.execute(sql)
                    db.execute(
                        "INSERT INTO meta VALUES ('schema_version', ?) "
                        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (str(step),),
                    )
        yield db
        if not db.postgres:
            db.conn.commit()
    except errors as exc:
        raise BundleError(
            f"{shown(target)}: the history database failed: {exc}",
            hint="a damaged file can be moved aside: `orch index` rebuilds it from the bundles",
        ) from None
    finally:
        db.conn.close()


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


def run_paths(db: HistoryDB) -> dict[str, str]:
    """Every indexed run's folder, by run id."""
    return dict(db.execute("SELECT run_id, path FROM runs").fetchall())


def series_of(
    conn: HistoryDB,
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
