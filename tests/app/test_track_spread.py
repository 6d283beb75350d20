"""`orch apply --track` and the start-to-start spread: a configuration whose runs recorded their
between-start spread (`bench.starts` > 1, metrics.json's `starts`) has its newest-run test
widened by it; the others are said once, as not measured."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from orchestrator.analyze.replication import starts_document
from orchestrator.app.history import index_runs, track
from orchestrator.results.manifest import write_manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyze"))
from analyze_fixtures import base_cell, write_run

SHAS = [f"{i:02d}" * 20 for i in range(12)]
METRIC = "output_throughput"


def _night(results: Path, i: int, spec: str, starts: int = 1) -> Path:
    """Night `i` of configuration `spec`: 6 repeats, over `starts` server starts."""
    rng = random.Random(f"{i}-{spec}")
    cell = base_cell(f"{spec}-1a2b3c4d", version=SHAS[i], axes={"spec": spec})
    cell["repo"]["requested"] = f"nightly-{i}"
    offsets = [rng.gauss(0, 0.02) for _ in range(starts)]
    start_of = {n: 1 + (n - 1) * starts // 6 for n in range(1, 7)}
    repeats = [
        {METRIC: 90.0 * (1 + offsets[start_of[n] - 1] + 0.01 * rng.gauss(0, 1))}
        for n in range(1, 7)
    ]
    run = write_run(results, f"20261201-{i:02d}0000-nightly-{spec[:4]}",
                    [{"cell": cell, "repeats": repeats}])  # fmt: skip
    doc = json.loads((run / "run.json").read_text())
    doc.update(playbook="nightly", started=f"2026-12-01T{i:02d}:00:00+0000", finished="x")
    (run / "run.json").write_text(json.dumps(doc))
    cell_dir = run / "cells" / cell["id"]
    record: dict[str, Any] = json.loads((cell_dir / "cell.json").read_text())
    record["started"] = 1_796_000_000 + 3600 * i
    (cell_dir / "cell.json").write_text(json.dumps(record))
    if starts > 1:
        metrics = json.loads((cell_dir / "metrics.json").read_text())
        rows = [{"n": n, **r} for n, r in enumerate(metrics["repeats"], 1)]
        metrics["starts"] = starts_document(rows, start_of)
        (cell_dir / "metrics.json").write_text(json.dumps(metrics))
    write_manifest(run)
    return run


def test_track_says_once_which_configurations_have_no_measured_spread(tmp_path: Path) -> None:
    results = tmp_path / "results"
    last: Path | None = None
    for i in range(12):
        _night(results, i, "eagle3-2", starts=3 if i == 9 else 1)  # one night measured it
        last = _night(results, i, "off")
    assert last is not None
    index_runs(results)
    found, _, notes = track(results, last, METRIC)
    assert found == []
    # the run tracked holds one configuration: "off", never run over several starts
    assert notes == [
        "start-to-start spread not measured for 1 of 1 configuration(s): their test takes the "
        "runs' own spread (a run with bench.starts: 2 or more measures it)"
    ]
    eagle = sorted(results.glob("*-nightly-eagl"))[-1]
    found, _, notes = track(results, eagle, METRIC)
    assert found == [] and notes == []  # night 9's 3 starts measured eagle3-2's spread
