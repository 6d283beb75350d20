"""An SLO search end to end on the simulator: `orch plan` states it, `orch apply` runs its
levels on one server start, each level's repeats stopped by the SLO rule, and `orch report`
(table and JSON), `orch diff` and `orch history` give its answer with its confidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_helpers import BENCH, SERVE, free_port, load, only_run, orch

pytestmark = [pytest.mark.slow]


def playbook(port: int) -> dict[str, object]:
    """A light rate and a flood: far apart, so the boundary is clear on a loaded machine."""
    return {
        "name": "slo-sim",
        "hosts": "all",
        "matrix": {"rate": [1, 1000]},
        "env": {"ORCH_SIM_TIME_SCALE": "0.05"},
        "server": {
            "adapter": "sglang",
            "launcher": SERVE,
            "args": {"model-path": "/models/m", "host": "127.0.0.1", "port": port},
            "ready": {"timeout": 60},
        },
        "bench": {
            "adapter": "sglang.bench_serving",
            "launcher": BENCH,
            "args": {
                "dataset-name": "random-ids",
                "random-input-len": 2048,
                "random-output-len": 8,
                "num-prompts": 12,
                "request-rate": "{{ matrix.rate }}",
            },
            "repeats": 4,  # at 90 %, 4 repeats decide a level
            "search": {"axis": "rate", "slo": {"p99_ttft_ms": 1000}, "confidence": "90%"},
        },
    }


def test_the_search_names_its_answer_with_confidence(tmp_path: Path) -> None:
    book, results, home = tmp_path / "slo.yml", tmp_path / "results", tmp_path / "home"
    book.write_text(json.dumps(playbook(free_port())))
    planned = orch("plan", str(book), cwd=tmp_path, home=home)
    assert planned.returncode == 0, planned.stderr
    assert (
        "SLO search on localhost: the highest rate of 1, 1000 meeting p99_ttft_ms ≤ 1000; "
        "1 server start(s); each level 4..4 repeats" in planned.stdout
    ), planned.stdout

    ran = orch("apply", str(book), "--results", str(results), cwd=tmp_path, home=home)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "server starts: 1 for 2 cells" in ran.stdout
    run = only_run(results)
    for cell in (run / "cells").iterdir():
        stopped = load(cell / "repeats.json")
        assert stopped["stopped"] == "decided" and stopped["ran"] == 4, stopped

    report = orch("report", str(run), "--format", "json", cwd=tmp_path, home=home)
    assert report.returncode == 0, report.stderr
    (row,) = [r for r in json.loads(report.stdout) if r["metric"] == "slo_capacity"]
    search = row["slo_search"]
    assert row["value"] == 1 and row["unit"] == "rate" and row["confidence"] == 0.9
    assert search["decided"] and search["boundary"] == 1000
    assert [lv["verdict"] for lv in search["levels"]] == ["holds", "fails"]
    light, flood = search["levels"]
    assert light["metrics"]["p99_ttft_ms"]["high"] <= 1000 < flood["metrics"]["p99_ttft_ms"]["low"]
    assert (
        search["sentence"].startswith("highest rate meeting the SLO: 1 (p99_ttft_ms ")
        and "holds with 90% confidence over 4 repeats); 1000 fails" in search["sentence"]
    )

    table = orch("report", str(run), cwd=tmp_path, home=home)
    assert "SLO search along rate on localhost: p99_ttft_ms ≤ 1000" in table.stdout
    assert search["sentence"] in table.stdout

    diff = orch("diff", str(run), str(run), cwd=tmp_path, home=home)
    assert "slo_capacity (rate on localhost): 1 -> 1 (same)" in diff.stdout, diff.stdout
    history = orch("history", "slo-sim", "--metric", "slo_capacity", "--format", "json",
                   "--results", str(results), cwd=tmp_path, home=home)  # fmt: skip
    assert history.returncode == 0, history.stderr
    (series,) = json.loads(history.stdout)["series"]  # on the lowest level's cell
    assert [(p["median"], p["unit"]) for p in series["points"]] == [(1.0, "rate")]
