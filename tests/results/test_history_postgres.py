"""The results history on a real PostgreSQL server (ORCH_DB=postgresql://...): the same schema,
migrations and answers as SQLite, the schema guard, and idempotent indexing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pgserver import PostgresServer

CLI = Path(__file__).resolve().parents[1] / "cli"
sys.path.insert(0, str(CLI))
from cli_helpers import run_orch  # noqa: E402
from test_history_cli import _night  # noqa: E402


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    server = PostgresServer().start()
    try:
        yield server.url
    finally:
        server.stop()


def test_postgres_holds_the_same_history_as_sqlite(tmp_path: Path, postgres: str) -> None:
    results = tmp_path / "results"
    for i in range(12):
        _night(results, i, 94.0 if i < 7 else 62.0)
        _night(results, i, 89.0, spec="off")
    pg = {"ORCH_DB": postgres}
    first = run_orch(tmp_path, "index", "--results", str(results), env=pg)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("indexed 1 cells") == 24
    assert run_orch(tmp_path, "index", "--results", str(results), env=pg).stdout.count(
        "indexed already") == 24  # fmt: skip
    assert not (results / "history.sqlite").exists()  # the server holds it

    def answer(env: dict[str, str]) -> dict[str, object]:
        done = run_orch(tmp_path, "history", "--format", "json", "--results", str(results),
                        env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        return {s["label"]: (s["points"], s["change_points"]) for s in doc["series"]}

    on_postgres = answer(pg)
    on_sqlite = answer({})  # indexes the same bundles into results/history.sqlite
    assert on_postgres == on_sqlite
    (step,) = on_postgres["nightly spec=eagle3-2 @gpu01"][1]
    assert step["index"] == 7 and step["regression"]
    with psycopg.connect(postgres) as conn:
        (version,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert version == "1"
        (runs,) = conn.execute("SELECT count(*) FROM runs").fetchone()
        assert runs == 24


def test_a_postgres_history_from_a_newer_orch_is_refused(tmp_path: Path, postgres: str) -> None:
    results = tmp_path / "results"
    results.mkdir()
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '99') ON CONFLICT DO NOTHING")
    try:
        done = run_orch(tmp_path, "history", "--results", str(results), env={"ORCH_DB": postgres})
        assert done.returncode == 2, done.stdout
        assert "history schema 99 was written by a newer orch" in done.stderr
    finally:
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")


def test_two_indexers_at_once_on_a_fresh_postgres_database(tmp_path: Path, postgres: str) -> None:
    """Issue 39 item 12 on PostgreSQL: writers queue on one lock, the schema is made once."""
    results = tmp_path / "results"
    for i in range(6):
        _night(results, i, 94.0)
    env = {k: v for k, v in os.environ.items() if k != "ORCH_RESULTS"}
    argv = [sys.executable, "-m", "orchestrator", "index", "--results", str(results)]
    for trial in range(2):
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE race{trial}")
        env["ORCH_DB"] = postgres.replace("/orch?", f"/race{trial}?")
        pipe = subprocess.PIPE
        both = [
            subprocess.Popen(argv, cwd=tmp_path, env=env, text=True, stdout=pipe, stderr=pipe)
            for _ in range(2)
        ]
        said = [p.communicate(timeout=120) for p in both]
        assert [p.returncode for p in both] == [0, 0], said
        assert sum(out.count("indexed 1 cells") for out, _ in said) == 6
