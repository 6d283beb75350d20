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

import math
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

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
TABLES = ("meta", "runs", "series", "cells", "metrics")
# Spellings of PostgreSQL's scheme a user may write (libpq's two, SQLAlchemy's dialect+driver).
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgres+psycopg",
                    "postgresql+psycopg2", "postgresql+psycopg3")  # fmt: skip
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/")
_SECRET_KEYS = ("password", "passwd", "pass", "pwd", "sslpassword")
_LOCK_KEY = 0x6F726368  # "orch": the advisory lock PostgreSQL writers serialise on

Target = Path | str  # a SQLite file, or a PostgreSQL URL


def db_target(results_dir: Path, environ: dict[str, str] | None = None) -> Target:
    """`ORCH_DB` (a PostgreSQL URL, a path, or sqlite:///path), else history.sqlite in the
    results folder. A URL of another scheme is refused: taken as a path it would make a file
    named after it (its password too)."""
    given = (os.environ if environ is None else environ).get("ORCH_DB", "").strip()
    if not given:
        return results_dir / DB_FILE
    found = _SCHEME.match(given)
    if found is None:
        return Path(given).absolute()
    scheme = found.group(1).lower()
    rest = given[found.end() :]
    if scheme in POSTGRES_SCHEMES and rest.startswith("/"):
        return "postgresql:/" + rest  # psycopg reads libpq's spelling only
    body = given[len(scheme) + 1 :]
    if scheme == "sqlite" and body.startswith("//") and body.strip("/"):
        # SQLAlchemy's spelling: sqlite:///relative/file, sqlite:////absolute/file
        return Path(body.removeprefix("///") if body.startswith("///") else body[2:]).absolute()
    said = "is not a URL" if scheme in (*POSTGRES_SCHEMES, "sqlite") else "is not known"
    raise InputError(
        f"ORCH_DB {shown(given)!r}: not a history orch can open ({scheme}: {said})",
        key_path="ORCH_DB",
        hint="postgresql://user@host/db, sqlite:///path/history.sqlite, or a file path",
    )


def shown(target: Target) -> str:
    """The target as an error says it: a URL without its password (after the user, or as a
    query parameter)."""
    if isinstance(target, Path):
        return str(target)
    try:
        parts = urlsplit(target)
    except ValueError:
        return target.partition("://")[0] + "://..."
    netloc = parts.netloc.rpartition("@")
    where = (netloc[0].split(":")[0] + "@" if netloc[1] else "") + netloc[2]
    query = "&".join(
        f"{k}=***" if k.lower() in _SECRET_KEYS else f"{k}={v}"
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    return urlunsplit((parts.scheme, where, parts.path, query, parts.fragment))


def _secrets(target: Target) -> list[str]:
    """The passwords `target` holds, to be scrubbed from a driver's message."""
    if isinstance(target, Path):
        return []
    try:
        parts = urlsplit(target)
    except ValueError:
        return [target]
    said = [v for k, v in parse_qsl(parts.query) if k.lower() in _SECRET_KEYS]
    return [s for s in [parts.password or "", *said] if s]


def _said(exc: BaseException, target: Target) -> str:
    """A driver's message, one line, no password in it."""
    text = " ".join(str(exc).split())
    for secret in _secrets(target):
        text = text.replace(secret, "***")
    return text


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
        """All or nothing, one writer at a time: SQLite's write lock is taken at the start
        (BEGIN IMMEDIATE, waiting up to 30 s for another writer), PostgreSQL writers queue on
        one advisory lock."""
        if self.postgres:
            with self.conn.transaction():
                self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                yield
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")


def _driver_errors() -> tuple[type[BaseException], ...]:
    try:
        import psycopg
    except ImportError:
        return (sqlite3.Error,)
    return (sqlite3.Error, psycopg.Error)


def _connect(target: Target) -> HistoryDB:
    if isinstance(target, Path):
        target.parent.mkdir(parents=True, exist_ok=True)
        # autocommit: each transaction is begun by HistoryDB.transaction, as a writer
        conn = sqlite3.connect(target, timeout=30, isolation_level=None)
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


def _tables(db: HistoryDB) -> set[str]:
    """The tables the history holds."""
    if db.postgres:
        sql = ("SELECT table_name FROM information_schema.tables "
               "WHERE table_schema = current_schema()")  # fmt: skip
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    return {str(row[0]) for row in db.execute(sql).fetchall()}


def _version(db: HistoryDB, target: Target) -> int:
    if "meta" not in _tables(db):
        return 0
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        return int(row[0]) if row else 0
    except ValueError:
        raise BundleError(
            f"{shown(target)}: history schema version {row[0]!r} is not a number: "
            "not a history orch wrote, or a damaged one",
            hint="move it aside: `orch index` rebuilds the history from the bundles",
        ) from None


def _migrate(db: HistoryDB, target: Target) -> None:
    """Bring the schema to this orch's version; refuse a newer or a damaged one."""
    version = _version(db, target)
    if version > SCHEMA_VERSION:
        raise BundleError(
            f"{shown(target)}: history schema {version} was written by a newer orch "
            f"(this one reads up to {SCHEMA_VERSION})",
            hint="use the newer orch, or rebuild a copy with `orch index`",
        )
    if version < SCHEMA_VERSION:
        with db.transaction():
            version = _version(db, target)  # again, under the lock: another orch may be first
            db.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            for step, statements in MIGRATIONS:
                if step > version:
                    for sql in statements:
                        db.execute(sql)
                    db.execute(
                        "INSERT INTO meta VALUES ('schema_version', ?) "
                        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (str(step),),
                    )
    missing = [t for t in TABLES if t not in _tables(db)]
    if missing:
        raise BundleError(
            f"{shown(target)}: the history lacks its table(s) {', '.join(missing)}: damaged",
            hint="move it aside: `orch index` rebuilds the history from the bundles",
        )


def _failure(exc: BaseException, target: Target) -> BundleError:
    """A driver's error as orch says it; the hint to move the file aside only where the file
    itself is damaged (a busy or read-only history is not)."""
    said = _said(exc, target)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in said:
        hint = "another orch is writing the history: try again when it is done"
    elif isinstance(exc, sqlite3.OperationalError) and "readonly" in said.replace("-", ""):
        hint = "the history is read-only here: `orch history` still reads it"
    elif isinstance(exc, sqlite3.DatabaseError) and not isinstance(
        exc, sqlite3.OperationalError | sqlite3.IntegrityError
    ):
        hint = "a damaged file can be moved aside: `orch index` rebuilds it from the bundles"
    else:
        hint = None
    return BundleError(f"{shown(target)}: the history database failed: {said}", hint=hint)


@contextmanager
def open_db(target: Target) -> Iterator[HistoryDB]:
    """The history at `target`, made or migrated to this orch's schema."""
    errors = _driver_errors()
    opening: tuple[type[BaseException], ...] = (OSError, *errors)
    try:
        db = _connect(target)
    except opening as exc:
        raise BundleError(
            f"{shown(target)}: cannot open the history database: {_said(exc, target)}"
        ) from None
    try:
        _migrate(db, target)
        yield db
    except errors as exc:
        raise _failure(exc, target) from None
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
    undated: list[Point] | None = None,
) -> list[Series]:
    """Every series with `metric` (of `playbook`, or the given ids), points ordered by run time
    or by their commit's instant (`by="commit"`: a point without a readable commit date is
    left out, into `undated`); passed and failed cells alike (a failed one has no median
    unless it measured)."""
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
    rows = conn.execute(
        "SELECT s.series, s.label, s.playbook, s.host, c.run_id, c.cell_id, c.started, "
        "c.commit_sha, c.commit_date, c.requested, c.status, c.path, m.median, m.n, m.unit "
        "FROM metrics m JOIN cells c ON c.run_id = m.run_id AND c.cell_id = m.cell_id "
        f"JOIN series s ON s.series = c.series WHERE {' AND '.join(where)} "
        "ORDER BY s.label, s.series, c.started, c.run_id",
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
    every = list(out.values())
    if by == "commit":
        every = [_by_commit(s, undated if undated is not None else []) for s in every]
        every = [s for s in every if s.points]
    return every


def commit_instant(text: str | None) -> float | None:
    """A commit date (ISO 8601, any UTC offset, as git's %cI writes it) as epoch seconds; None
    when absent or unreadable. Dates are compared as instants, never as text."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _by_commit(series: Series, undated: list[Point]) -> Series:
    dated = []
    for p in series.points:
        instant = commit_instant(p.commit_date)
        if instant is None:
            undated.append(p)
        else:
            dated.append((instant, p.started if p.started is not None else math.inf, p))
    dated.sort(key=lambda item: item[:2])
    return Series(series.series, series.label, series.playbook, series.host,
                  [p for _, _, p in dated])  # fmt: skip
