"""playbooks/vllm_cpu_slo.yml against the real engine: an SLO search over request rates on one
server start finds the highest rate meeting a p99 TTFT, and `orch report --format json` holds
the answer and its confidence."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .conftest import Engine
from .engine_helpers import ROOT, apply_argv, load, only_run, orch, orch_env

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(900)]
PLAYBOOK = ROOT / "playbooks" / "vllm_cpu_slo.yml"


def test_the_slo_search_names_the_highest_rate_meeting_p99_ttft(
    engine: Engine, tmp_path: Path
) -> None:
    home, results = tmp_path / "home", tmp_path / "results"
    argv = apply_argv(engine.python, engine.model, results)
    argv[argv.index(str(ROOT / "playbooks" / "vllm_cpu.yml"))] = str(PLAYBOOK)
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=orch_env(home), timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "server starts: 1 for 2 cells" in proc.stdout  # one start for the whole search
    run = only_run(results)
    for cell in (run / "cells").iterdir():  # each level stopped once its SLO was decided
        assert load(cell / "repeats.json")["stopped"] == "decided", cell.name

    report = orch(home, "report", str(run), "--format", "json")
    assert report.returncode == 0, report.stderr
    (row,) = [r for r in json.loads(report.stdout) if r["metric"] == "slo_capacity"]
    search = row["slo_search"]
    assert (row["value"], row["unit"], row["confidence"]) == (4, "rate", 0.9), search
    assert search["decided"] and search["boundary"] == 1000, search["sentence"]
    light, flood = search["levels"]
    assert (light["verdict"], flood["verdict"]) == ("holds", "fails")
    assert light["metrics"]["p99_ttft_ms"]["high"] <= 500 < flood["metrics"]["p99_ttft_ms"]["low"]
    assert light["metrics"]["error_rate"]["median"] == 0.0
    assert light["goodput"] > 0  # vLLM's own count of requests within --goodput ttft:500
    assert search["sentence"].startswith("highest rate meeting the SLO: 4 (p99_ttft_ms ")
    assert "holds with 90% confidence over 4 repeats); 1000 fails" in search["sentence"]
