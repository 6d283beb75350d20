"""The runner samples GPU telemetry while a cell runs: the simulated nvidia-smi first on PATH, a
real runner, real files. Each bench repeat's start and end are on the samples' clock; a queue's
cells that share one server each sample their own time; no nvidia-smi or `telemetry: false`
means no telemetry and a note, never a failure."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from runner_helpers import (
    RunnerProcess,
    cell_dir,
    free_port,
    load,
    make_cell,
    payload,
    run_cell,
)

from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import write_host_state


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The simulated nvidia-smi first on the runner's PATH (2 GPUs); its state file."""
    state = write_host_state(tmp_path / "state.json", gpu_count=2)
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable, state=state)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("ORCH_SIM_STATE", raising=False)
    return state


def _with_telemetry(cell: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**cell, "telemetry": {"enabled": True, "interval": 0.1, "fields": None, **spec}}


def _sample_times(cdir: Path) -> list[float]:
    with (cdir / "telemetry.csv").open() as fh:
        return [float(row["t"]) for row in csv.DictReader(fh)]


def test_a_cell_samples_from_before_its_server_to_the_end_of_its_bench(
    home: Path, fake_smi: Path
) -> None:
    port = free_port()
    cell = _with_telemetry(make_cell(port, warmup=1, repeats=2, bench_args=("--sleep", "0.3")))
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    cdir = cell_dir(home)
    doc = load(cdir / "cell.json")
    info = doc["telemetry"]
    assert info["enabled"] is True and info["off"] is None, info
    assert info["interval_s"] == 0.1 and info["rows"] > 0
    times = _sample_times(cdir)
    assert len(times) == info["rows"] and times == sorted(times)
    gpus = {row.split(",")[1] for row in (cdir / "telemetry.csv").read_text().splitlines()[1:]}
    assert gpus == {"0", "1"}
    # every repeat's window lies inside the sampled span, on the same clock
    for name in ("warmup-1", "1", "2"):
        exit_doc = load(cdir / "bench" / name / "exit.json")
        assert exit_doc["start"] < exit_doc["end"]
        assert abs(exit_doc["end"] - exit_doc["start"] - exit_doc["seconds"]) < 0.01
        # sampled from before it started to after it ended: no part of it is extrapolated
        assert times[0] <= exit_doc["start"] and exit_doc["end"] < times[-1]
        assert doc["steps"]["server_start"]["start"] <= exit_doc["start"]
    assert doc["steps"]["server_start"]["start"] >= info["started"]
    assert info["stopped"] <= doc["steps"]["stop"]["start"]


def test_cells_sharing_a_server_each_sample_their_own_time(home: Path, fake_smi: Path) -> None:
    port = free_port()
    cells = [
        _with_telemetry(make_cell(port, cell_id=f"x-{i}-0000abc{i}", repeats=1)) for i in range(2)
    ]
    data = payload(cells[0])
    del data["cell"]
    data["queue"] = [{"cell": c, "session": "s1"} for c in cells]
    runner = RunnerProcess(home, data)
    runner.finish(60.0)
    docs = [load(cell_dir(home, c["id"]) / "cell.json") for c in cells]
    assert [d["status"] for d in docs] == ["passed", "passed"]
    assert docs[1]["session"]["started_server"] is False
    spans = []
    for c, doc in zip(cells, docs, strict=True):
        times = _sample_times(cell_dir(home, c["id"]))
        assert times and doc["telemetry"]["rows"] == len(times)
        spans.append((times[0], times[-1]))
        bench = load(cell_dir(home, c["id"]) / "bench" / "1" / "exit.json")
        assert times[0] <= bench["start"] and bench["end"] < times[-1]
    assert spans[0][1] < spans[1][0]  # no sample of the first cell's file is the second's


def test_telemetry_false_samples_nothing(home: Path, fake_smi: Path) -> None:
    cell = make_cell(free_port(), repeats=1)
    cell["telemetry"] = {"enabled": False, "interval": 1.0, "fields": None}
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    cdir = cell_dir(home)
    assert not (cdir / "telemetry.csv").exists()
    assert load(cdir / "cell.json")["telemetry"] == {
        "enabled": False,
        "off": "telemetry: false in the playbook",
    }


def test_no_nvidia_smi_is_a_note_not_a_failure(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # the server and bench run by absolute paths
    runner = run_cell(home, _with_telemetry(make_cell(free_port(), repeats=1)))
    assert runner.done["status"] == "passed", runner.done
    cdir = cell_dir(home)
    assert not (cdir / "telemetry.csv").exists()
    assert load(cdir / "cell.json")["telemetry"] == {
        "enabled": False,
        "off": "nvidia-smi not found on PATH",
    }
    assert "start" in load(cdir / "bench" / "1" / "exit.json")
