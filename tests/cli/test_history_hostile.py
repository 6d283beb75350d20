"""`orch index` and `orch history` under hostile and damaged input (issue 39): tampered and
damaged bundles, commit dates in other UTC offsets, odd ORCH_DB URLs, two indexers at once,
duplicate run ids, formula and escape text in CSV, infinite medians, moved results."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_orch
from test_history_cli import _night

from orchestrator.results.manifest import write_manifest

CELL = "eagle3-2-1a2b3c4d"


def _edit(run: Path, name: str, change: Callable[[Any], Any], *, manifest: bool = True) -> None:
    """Change one JSON file of the run's cell; with `manifest`, the bundle was written so (its
    MANIFEST agrees), else it was edited after."""
    path = run / "cells" / CELL / name
    doc = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps(change(doc)))
    if manifest:
        write_manifest(run)


def _set_summary(key: str, value: Any) -> Callable[[Any], Any]:
    def change(doc: Any) -> Any:
        doc["summary"]["output_throughput"][key] = value
        return doc

    return change


def _medians(results: Path, *args: str, cwd: Path | None = None) -> list[tuple[str, float]]:
    done = run_orch(cwd or results.parent, "history", "--format", "json", "--results",
                    str(results), *args)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    return [(p["run_id"], p["median"]) for s in doc["series"] for p in s["points"]]


def test_a_tampered_bundle_never_enters_through_history(tmp_path: Path) -> None:
    """Item 1: `history` indexed without verifying; `orch index` then said 'indexed already'."""
    results = tmp_path / "results"
    _night(results, 0, 94.0)
    bad = _night(results, 1, 94.0)
    _edit(bad, "metrics.json", _set_summary("median", 999.0), manifest=False)
    shown = run_orch(tmp_path, "history", "--format", "json", "--results", str(results))
    assert shown.returncode == 0, shown.stderr
    assert "999" not in shown.stdout
    assert f"{bad.name}: not indexed: does not match its manifest" in shown.stderr
    again = run_orch(tmp_path, "index", "--results", str(results))
    assert again.returncode == 1 and "indexed already" not in again.stderr
    assert f"{bad.name}: refused: does not match its manifest" in again.stderr


def test_one_bad_bundle_is_skipped_with_its_reason_and_the_rest_answered(tmp_path: Path) -> None:
    """Item 3: a metrics `n` of "3x" raised a ValueError on every `orch history`."""
    results = tmp_path / "results"
    good = _night(results, 0, 94.0)
    bad = _night(results, 1, 80.0)
    _edit(bad, "metrics.json", _set_summary("n", "3x"))
    shown = run_orch(tmp_path, "history", "--format", "json", "--results", str(results))
    assert shown.returncode == 0, shown.stderr
    assert [p["run_id"] for p in json.loads(shown.stdout)["series"][0]["points"]] == [good.name]
    assert "the repeat count n '3x' is not a count" in shown.stderr and bad.name in shown.stderr
    done = run_orch(tmp_path, "index", "--results", str(results))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{bad.name}: refused: " in done.stderr and "metrics.json" in done.stderr


def test_commit_dates_are_compared_as_instants(tmp_path: Path) -> None:
    """Items 2 and 4: dates in other UTC offsets sorted as text; undated runs came first."""
    results = tmp_path / "results"
    dates = {  # as text: 09:30 < 10:00 < 11:00; as instants: 09:00Z < 10:00Z < 10:30Z
        0: "2026-12-01T10:00:00+00:00",
        1: "2026-12-01T09:30:00-01:00",
        2: "2026-12-01T11:00:00+02:00",
        3: None,
    }
    runs = {}
    for i, date in dates.items():
        runs[i] = _night(results, i, 90.0 + i)
        _edit(runs[i], "repo.json", lambda _, d=date, i=i: {"sha": f"{i:02d}" * 20,
                                                            "commit_date": d})  # fmt: skip
    done = run_orch(tmp_path, "history", "--by", "commit", "--format", "json", "--results",
                    str(results))  # fmt: skip
    assert done.returncode == 0, done.stderr
    order = [p["run_id"] for s in json.loads(done.stdout)["series"] for p in s["points"]]
    assert order == [runs[2].name, runs[0].name, runs[1].name]
    assert "1 run(s) have no readable commit date" in done.stderr and runs[3].name in done.stderr


def test_a_damaged_metrics_file_is_said_and_indexed_once_repaired(tmp_path: Path) -> None:
    """Item 10: a truncated or non-UTF-8 metrics.json gave 'indexed 0 cells', then 'indexed
    already' forever."""
    results = tmp_path / "results"
    run = _night(results, 0, 94.0)
    metrics = run / "cells" / CELL / "metrics.json"
    whole = metrics.read_bytes()
    for damage, why in ((whole[: len(whole) // 2], "not valid JSON"),
                        (b"\xff\xfe" + whole, "cannot read")):  # fmt: skip
        metrics.write_bytes(damage)
        write_manifest(run)
        done = run_orch(tmp_path, "index", "--results", str(results))
        assert done.returncode == 1, done.stdout
        assert "refused" in done.stderr and why in done.stderr and "metrics.json" in done.stderr
    metrics.write_bytes(whole)
    write_manifest(run)
    repaired = run_orch(tmp_path, "index", "--results", str(results))
    assert repaired.returncode == 0 and "indexed 1 cells" in repaired.stdout


def test_orch_db_urls_are_parsed_and_never_made_into_files(tmp_path: Path) -> None:
    """Items 5 and 6: other spellings became SQLite paths (password included) and exited 0; a
    password in the query reached the message."""
    results = tmp_path / "results"
    _night(results, 0, 94.0)
    for url in ("POSTGRESQL://user:secret@127.0.0.1:1/db",
                "postgresql+psycopg://user:secret@127.0.0.1:1/db",
                "postgres://user@127.0.0.1:1/db?password=secret&sslmode=disable"):  # fmt: skip
        done = run_orch(tmp_path, "history", "--results", str(results), env={"ORCH_DB": url})
        assert done.returncode == 2, (url, done.stdout)
        assert "cannot open the history database" in done.stderr, done.stderr
        assert "secret" not in done.stdout + done.stderr and "user@127.0.0.1:1/db" in done.stderr
    for url in ("mysql://user:secret@127.0.0.1/db", "pg://user:secret@127.0.0.1/db"):
        done = run_orch(tmp_path, "index", "--results", str(results), env={"ORCH_DB": url})
        assert done.returncode == 2 and "is not known" in done.stderr, done.stderr
        assert "secret" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]  # no file named like a URL
    there = run_orch(tmp_path, "index", "--results", str(results),
                     env={"ORCH_DB": f"sqlite:///{tmp_path}/h.sqlite"})  # fmt: skip
    assert there.returncode == 0 and (tmp_path / "h.sqlite").is_file(), there.stderr


def test_two_indexers_at_once_both_succeed(tmp_path: Path) -> None:
    """Item 12: the loser of the race exited 2 with 'UNIQUE constraint failed' and a hint to
    move a healthy history aside (2 of 3 trials)."""
    results = tmp_path / "results"
    for i in range(8):
        _night(results, i, 94.0)
    env = {k: v for k, v in os.environ.items() if k != "ORCH_RESULTS"}
    argv = [sys.executable, "-m", "orchestrator", "index", "--results", str(results)]
    for trial in range(3):
        (results / "history.sqlite").unlink(missing_ok=True)
        pipe = subprocess.PIPE
        both = [
            subprocess.Popen(argv, cwd=tmp_path, env=env, text=True, stdout=pipe, stderr=pipe)
            for _ in range(2)
        ]
        said = [p.communicate(timeout=120) for p in both]
        for p, (_, err) in zip(both, said, strict=True):
            assert p.returncode == 0, (trial, err)
            assert "moved aside" not in err and "UNIQUE" not in err
        assert sum(out.count("indexed 1 cells") for out, _ in said) == 8
    with sqlite3.connect(results / "history.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (8,)


def test_a_second_run_under_an_indexed_id_is_refused(tmp_path: Path) -> None:
    """Item 11: a run with another's id took its place (its commit and median shown)."""
    results = tmp_path / "results"
    first = _night(results, 0, 94.0)
    other = results / (first.name + "-copy")
    shutil.copytree(first, other)
    doc = json.loads((other / "run.json").read_text())
    doc["started"] = "2026-12-02T00:00:00+0000"
    (other / "run.json").write_text(json.dumps(doc))
    _edit(other, "metrics.json", _set_summary("median", 50.0))
    done = run_orch(tmp_path, "index", "--results", str(results))
    assert done.returncode == 1
    assert "is indexed already for another run" in done.stderr and "-copy" in done.stderr
    ((run_id, median),) = _medians(results)
    assert run_id == first.name and median > 90  # the first run's, not the other's 50
    moved = tmp_path / "elsewhere"
    shutil.copytree(first, moved / first.name)  # the same run, copied: said, not refused
    same = run_orch(tmp_path, "index", str(moved / first.name), "--results", str(results))
    assert same.returncode == 0 and "indexed already" in same.stdout, same.stderr


def test_csv_cells_are_never_formulas_or_escapes(tmp_path: Path) -> None:
    """Item 7: cells starting = @ - + were written as they came; BEL/OSC reached stdout."""
    results = tmp_path / "results"
    run = _night(results, 0, 94.0)
    doc = json.loads((run / "run.json").read_text())
    doc["playbook"] = '=HYPERLINK("http://x")'
    (run / "run.json").write_text(json.dumps(doc))

    def pin(cell: Any) -> Any:
        cell["cell"]["repo"]["requested"] = "@SUM(A1)\x1b]0;owned\x07"
        cell["cell"]["repo"]["version"] = "-2+3"
        return cell

    _edit(run, "cell.json", pin)
    done = run_orch(tmp_path, "history", "--format", "csv", "--results", str(results))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    header, row = list(csv.reader(io.StringIO(done.stdout)))
    said = dict(zip(header, row, strict=True))
    assert said["series"].startswith("'=") and said["requested"] == "'@SUM(A1)"
    assert said["commit"] == "'-2+3"
    assert not any(cell.startswith(("=", "@", "-", "+")) for cell in row if cell != row[-1])


def test_infinite_medians_are_refused_and_huge_ones_drawn(tmp_path: Path) -> None:
    """Item 9: `Infinity` was written into --format json; ±1e308 made the chart all nan."""
    results = tmp_path / "results"
    inf = _night(results, 0, 94.0)
    _edit(inf, "metrics.json", _set_summary("median", float("inf")))
    for i, value in ((1, 1e308), (2, -1e308), (3, 94.0)):
        _edit(_night(results, i, 94.0), "metrics.json", _set_summary("median", value))
    done = run_orch(tmp_path, "history", "--format", "json", "--results", str(results))
    assert done.returncode == 0, done.stderr
    assert "not a finite number" in done.stderr and inf.name in done.stderr

    def strict(word: str) -> None:
        raise AssertionError(f"not strict JSON: {word}")

    doc = json.loads(done.stdout, parse_constant=strict)
    assert len(doc["series"][0]["points"]) == 3
    page = run_orch(tmp_path, "history", "--format", "html", "-o", "dash", "--results",
                    str(results))  # fmt: skip
    assert page.returncode == 0, page.stderr
    html = (tmp_path / "dash" / "index.html").read_text()
    line = re.findall(r'points="([^"]*)"', html)
    drawn = re.findall(r'c[xy]="([^"]*)"', html) + " ".join(line).replace(",", " ").split()
    assert len(drawn) == 12 and all(math.isfinite(float(v)) for v in drawn), drawn
    assert html.count("<circle") == 3


def test_links_and_commands_work_from_another_folder_and_after_a_move(tmp_path: Path) -> None:
    """Item 8: paths were stored relative to the folder indexed from."""
    results = tmp_path / "results"
    for i in range(2):
        _night(results, i, 94.0)
    assert run_orch(tmp_path, "index", "--results", "results").returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def links(results_dir: Path) -> list[Path]:
        done = run_orch(elsewhere, "history", "--format", "html", "-o", "dash", "--results",
                        str(results_dir))  # fmt: skip
        assert done.returncode == 0, done.stderr
        html = (elsewhere / "dash" / "index.html").read_text()
        hrefs = [part.split('"')[0] for part in html.split('<a href="')[1:]]
        assert len(hrefs) == 2
        return [Path(h.removeprefix("file://")) for h in hrefs]

    assert all(p.is_dir() for p in links(results))
    moved = tmp_path / "moved"
    results.rename(moved)
    assert all(p.is_dir() and moved in p.parents for p in links(moved))


def test_odd_histories_and_options_are_refused_with_their_reason(tmp_path: Path) -> None:
    """Item 16: a non-integer schema version crashed; a dropped table passed `orch index`;
    bad --since / --min-change were accepted; an unknown -m exited 0 without the known ones."""
    results = tmp_path / "results"
    _night(results, 0, 94.0)
    assert run_orch(tmp_path, "index", "--results", str(results)).returncode == 0
    for args, said in (
        (["--since", "-5d"], "--since"),
        (["--since", "nand"], "--since"),
        (["--min-change", "-0.1"], "--min-change"),
        (["--min-change", "nan"], "--min-change"),
        (["-m", "output_thruput"], "output_throughput"),
    ):
        done = run_orch(tmp_path, "history", *args, "--results", str(results))
        assert done.returncode == 2 and said in done.stderr, (args, done.stdout, done.stderr)
    db = results / "history.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE metrics")
    dropped = run_orch(tmp_path, "index", "--results", str(results))
    assert dropped.returncode == 2 and "lacks its table(s) metrics" in dropped.stderr
    db.unlink()
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', 'one')")
    odd = run_orch(tmp_path, "history", "--results", str(results))
    assert odd.returncode == 2 and "is not a number" in odd.stderr
    assert "Traceback" not in odd.stderr


def test_run_ids_with_newlines_and_escapes_stay_on_one_line(tmp_path: Path) -> None:
    """Item 15: a run id put newlines and ANSI codes into `orch index` and `orch history`."""
    results = tmp_path / "results"
    run = _night(results, 0, 94.0)
    doc = json.loads((run / "run.json").read_text())
    doc["run_id"] = "night\nFAKE: all good\x1b[31m"
    (run / "run.json").write_text(json.dumps(doc))
    write_manifest(run)
    done = run_orch(tmp_path, "index", "--results", str(results))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and "\x1b" not in done.stdout
    shown = run_orch(tmp_path, "history", "--results", str(results))
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout
    assert not any(line.startswith("FAKE") for line in shown.stdout.splitlines())


def test_a_read_only_history_still_answers(tmp_path: Path) -> None:
    """Item 16: a history that cannot be written blocked `orch history` when a run was new."""
    results = tmp_path / "results"
    first = _night(results, 0, 94.0)
    assert run_orch(tmp_path, "index", "--results", str(results)).returncode == 0
    _night(results, 1, 94.0)
    db = results / "history.sqlite"
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i (an immutable file: read-only even for root) is not available")
    try:
        done = run_orch(tmp_path, "history", "--format", "json", "--results", str(results))
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    assert done.returncode == 0, done.stderr
    assert "history: new runs not indexed" in done.stderr and "readonly" in done.stderr
    assert [p["run_id"] for s in json.loads(done.stdout)["series"] for p in s["points"]] == [
        first.name
    ]
