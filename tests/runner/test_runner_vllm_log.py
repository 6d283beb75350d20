"""A vllm cell end to end: the runner times each repeat and records the host's UTC offset, and
the log metrics of each repeat come from the server's log lines inside that repeat's window.

The server and bench are tests/fixtures/vllm/fake_vllm.py: vLLM 0.10's log format in local
time (here Asia/Kolkata, UTC+5:30, so a clock taken as UTC would miss every window), and
numbers that say which phase (warm-up, repeat 1, repeat 2, ramp-up) each interval was in.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from runner_helpers import cell_dir, free_port, load, run_cell

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.analyze.verdict import score_cell
from orchestrator.cell import Cell, SnapshotSpec

FAKE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "fake_vllm.py"
CELL_ID = "vllm-1-0000abcd"


def _cell(port: int) -> Cell:
    server = server_adapter("vllm").build(
        {
            "launcher": f"{sys.executable} {FAKE} serve",
            "args": {"model": "/models/fake", "port": port},
            "ready": {"timeout": 20, "interval": 0.1},
        }
    )
    bench = bench_adapter("vllm.bench_serve").build(
        {"launcher": f"{sys.executable} {FAKE} bench", "warmup": 1, "repeats": 2, "timeout": 60},
        server,
    )
    return Cell(
        id=CELL_ID,
        playbook="vllm-log",
        host="local",
        axes={"x": 1},
        env={"ORCH_FAKE_BENCH_SECONDS": "6.5"},
        server=server,
        bench=bench,
        cell_timeout=120.0,
        snapshot=SnapshotSpec(pip_freeze=False, topo=False),
    )


def test_each_repeat_reads_its_own_log_lines(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # the host's zone: runner and server inherit it
    cell = _cell(free_port())
    runner = run_cell(home, cell.model_dump(mode="json"), timeout=120.0)
    assert runner.done["status"] == "passed", runner.done
    cdir = cell_dir(home, CELL_ID)
    exit_doc = load(cdir / "bench" / "1" / "exit.json")
    assert exit_doc["utc_offset_s"] == exit_doc["utc_offset_end_s"] == 19800

    metrics = score_cell(cdir, cell).metrics
    repeats = {r["n"]: r for r in metrics["repeats"]}
    # each repeat's own phase (a ramp-up interval at either edge is outvoted by the median)
    assert repeats[1]["log_gen_throughput"] == 800.0, metrics["notes"]
    assert repeats[2]["log_gen_throughput"] == 700.0
    assert repeats[1]["log_accept_len"] == pytest.approx(2.5, abs=0.1)
    assert repeats[2]["log_accept_len"] == pytest.approx(2.3, abs=0.1)
    assert metrics["sources"]["log_gen_throughput"] == "server.log inside the repeat's window"
    # the whole life (a warm-up at 300 tok/s and 1.6 tokens/step, ramp-ups at 95.3 and 1.9):
    # what the log metrics were before, a number from neither repeat
    facts = metrics["server_facts"]
    assert facts["generation_throughput"]["median"] != 800.0
    assert facts["generation_throughput"]["lines"] > 12
    assert facts["spec_decoding"]["mean_acceptance_length"]["mean"] < 2.25
