"""`orch index` and `orch history` on written bundles: a nightly series of 12 runs with a step,
another configuration beside it, a damaged bundle refused, and the database's schema guard."""

from __future__ import annotations

import json
import random
import sqlite3
import sys
from pathlib import Path
from typing import Any

from cli_helpers import run_orch

from orchestrator.results.manifest import write_manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyze"))
from analyze_fixtures import base_cell, write_run

SHAS = [f"{i:02d}" * 20 for i in range(12)]


def _night(results: Path, i: int, value: float, spec: str = "eagle3-2") -> Path:
    rng = random.Random(f"{i}-{spec}")
    cell = base_cell(f"{spec}-1a2b3c4d", version=SHAS[i], axes={"spec": spec})
    cell["repo"]["requested"] = f"nightly-{i}"
    repeats = [{"output_throughput": value * (1 + 0.01 * rng.gauss(0, 1))} for _ in range(3)]
    run = write_run(results, f"20261201-{i:02d}0000-nightly-{spec[:4]}",
                    [{"cell": cell, "repeats": repeats}])  # fmt: skip
    doc = json.loads((run / "run.json").read_text())
    doc.update(playbook="nightly", started=f"2026-12-01T{i:02d}:00:00+0000", finished="x")
    (run / "run.json").write_text(json.dumps(doc))
    cell_json = run / "cells" / cell["id"] / "cell.json"
    record: dict[str, Any] = json.loads(cell_json.read_text())
    record["started"] = 1_796_000_000 + 3600 * i
    cell_json.write_text(json.dumps(record))
    write_manifest(run)
    return run


def test_a_step_in_a_nightly_series_is_a_regression_with_its_command(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for i in range(12):
        _night(results, i, 94.0 if i < 7 else 62.0)
        _night(results, i, 89.0, spec="off")  # another configuration: flat
    first = run_orch(tmp_path, "index", "--results", str(results))
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("indexed 1 cells") == 24
    again = run_orch(tmp_path, "index", "--results", str(results))
    assert again.stdout.count("indexed already") == 24  # idempotent

    shown = run_orch(tmp_path, "history", "nightly", "--results", str(results))
    assert shown.returncode == 0, shown.stderr
    assert (
        "nightly spec=eagle3-2 @gpu01" in shown.stdout and "nightly spec=off @gpu01" in shown.stdout
    )
    (mark,) = [line for line in shown.stdout.splitlines() if "REGRESSION -3" in line]
    assert mark.startswith("20261201-070000-nightly-eagl") and SHAS[7][:12] in mark
    said = [line for line in shown.stdout.splitlines() if line.startswith("REGRESSION")]
    assert len(said) == 1 and "(commits 060606060606 -> 070707070707)" in said[0]
    assert "settle it with: orch investigate " in shown.stdout
    assert "-060000-nightly-eagl/cells/eagle3-2-1a2b3c4d" in shown.stdout

    picked = run_orch(tmp_path, "history", "--cells", "spec=off", "--results", str(results))
    assert "nightly spec=off @gpu01" in picked.stdout and "eagle3-2 @" not in picked.stdout
    none = run_orch(tmp_path, "history", "--cells", "spec=tree", "--results", str(results))
    assert none.returncode == 2 and "spec" in none.stderr  # says which values exist

    as_json = json.loads(run_orch(tmp_path, "history", "--format", "json", "--results",
                                  str(results)).stdout)  # fmt: skip
    steps = {s["label"]: s["change_points"] for s in as_json["series"]}
    assert steps["nightly spec=off @gpu01"] == []
    (step,) = steps["nightly spec=eagle3-2 @gpu01"]
    assert step["index"] == 7 and step["regression"] and step["change"] < -0.3


def test_a_damaged_bundle_is_refused_with_its_reason(tmp_path: Path) -> None:
    results = tmp_path / "results"
    run = _night(results, 0, 94.0)
    (run / "cells" / "eagle3-2-1a2b3c4d" / "metrics.json").write_text("{}")
    done = run_orch(tmp_path, "index", "--results", str(results))
    assert done.returncode == 1
    assert "refused: does not match its manifest" in done.stderr and "metrics.json" in done.stderr


def test_a_history_from_a_newer_orch_is_refused(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    with sqlite3.connect(results / "history.sqlite") as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '99')")
    done = run_orch(tmp_path, "history", "--results", str(results))
    assert done.returncode == 2, done.stdout  # a bundle error: nothing read
    assert "history schema 99 was written by a newer orch" in done.stderr
    assert "Traceback" not in done.stderr
    pg = run_orch(tmp_path, "history", "--results", str(results),
                  env={"ORCH_DB": "postgresql://orch:s3cret@db.invalid/orch"})  # fmt: skip
    assert pg.returncode == 2, pg.stdout
    assert "postgresql://orch@db.invalid/orch: cannot open the history database" in pg.stderr
    assert "s3cret" not in pg.stderr + pg.stdout


def test_no_results_folder_is_said_and_none_is_made(tmp_path: Path) -> None:
    done = run_orch(tmp_path, "history", "--results", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "no such results folder" in done.stderr
    assert not (tmp_path / "nowhere").exists()


def test_the_track_key_is_checked_where_it_is_written(tmp_path: Path) -> None:
    base = "name: p\nserver: {command: [s, --port, '1']}\nbench: {command: [b]}\n"
    (tmp_path / "ok.yml").write_text(base + "track: {metric: mean_ttft_ms}\n")
    (tmp_path / "bad.yml").write_text(base + "track: {metrik: mean_ttft_ms}\n")
    assert run_orch(tmp_path, "validate", "ok.yml").returncode == 0
    bad = run_orch(tmp_path, "validate", "bad.yml")
    assert bad.returncode == 2 and "bad.yml:4" in bad.stderr and "track.metrik" in bad.stderr


def test_the_dashboard_is_one_self_contained_page(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for i in range(12):
        _night(results, i, 94.0 if i < 7 else 62.0)
        _night(results, i, 89.0, spec="off<script>")  # a label from a bundle: escaped
    done = run_orch(tmp_path, "history", "--format", "html", "-o", "dash", "--results",
                    str(results))  # fmt: skip
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "dash" / "index.html").read_text()
    assert page.count("<svg") == 2 and page.count('class="change-point"') == 1
    assert "<script" not in page and "off&lt;script&gt;" in page
    assert "src=" not in page and "Content-Security-Policy" in page
    assert 'class="regression"' in page and "orch investigate " in page
    assert page.count("<circle") == 24  # every run a point, each a link to its cell
    assert "-070000-nightly-eagl/cells/eagle3-2-1a2b3c4d" in page
    drawn = run_orch(tmp_path, "history", "--plot", "h.png", "--results", str(results))
    assert drawn.returncode == 0, drawn.stderr
    assert (tmp_path / "h.png").read_bytes().startswith(b"\x89PNG")
    no_out = run_orch(tmp_path, "history", "--format", "html", "--results", str(results))
    assert no_out.returncode == 2 and "-o DIR" in no_out.stderr
