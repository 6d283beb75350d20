"""The one bundle reader through the real CLI: a bundle newer than this orch is refused clearly,
and the probe and the reader share one declared snapshot shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from results_helpers import make_cell_dir

from orchestrator.results.archive import pack
from orchestrator.results.bundle import BundleWriter
from orchestrator.results.layout import SCHEMA_VERSION
from orchestrator.runner.probe import gpu as probe_gpu
from orchestrator.runner.probe import parse as probe_parse
from orchestrator.runner.probe import shape as probe_shape

CELL = "spec-off-11111111"


def orch(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write_run(results: Path, run_id: str, tmp_path: Path) -> Path:
    """A small finished run: one passed cell with metrics, as the controller writes it."""
    writer = BundleWriter(results, run_id)
    writer.write_json("plan.json", {"cells": [{"id": CELL}]})
    cell_dir = make_cell_dir(tmp_path / f"src-{run_id}", CELL)
    writer.add_cell_dir(CELL, cell_dir)
    metrics = {"repeats": [{"n": 1, "tput": 90.0}], "summary": {"tput": {"median": 90.0}}}
    writer.write_cell_file(CELL, "metrics.json", metrics)
    run = {"run_id": run_id, "playbook": "demo", "status": "passed", "hosts": ["gpu01"]}
    writer.write_json("run.json", {**run, "cells": {CELL: {"host": "gpu01", "status": "passed"}}})
    writer.finalize()
    return writer.path


def make_newer(path: Path, version: int = SCHEMA_VERSION + 1) -> None:
    doc = json.loads(path.read_text())
    doc["schema_version"] = version
    path.write_text(json.dumps(doc))


def test_a_current_bundle_reads(tmp_path: Path) -> None:
    run = write_run(tmp_path / "results", "r1", tmp_path)
    shown = orch(tmp_path, "show", str(run))
    assert shown.returncode == 0, shown.stderr
    assert "run       r1" in shown.stdout and CELL in shown.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["show", "{run}"],
        ["show", "{run}/{cell}"],
        ["report", "{run}"],
        ["diff", "{run}", "{run}"],
        ["audit", "{run}", "--no-drift"],
    ],
)
def test_a_newer_run_is_refused_with_one_clear_error(tmp_path: Path, command: list[str]) -> None:
    run = write_run(tmp_path / "results", "r1", tmp_path)
    make_newer(run / "run.json")
    args = [a.format(run=run, cell=CELL) for a in command]
    res = orch(tmp_path, *args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stderr.strip() == (
        f"error: bundle {run} was written by a newer orch (schema {SCHEMA_VERSION + 1}, "
        f"this orch reads up to {SCHEMA_VERSION}); upgrade orch"
    )
    assert "Traceback" not in res.stderr and not res.stdout


def test_a_newer_cell_is_refused_too(tmp_path: Path) -> None:
    run = write_run(tmp_path / "results", "r1", tmp_path)
    make_newer(run / "cells" / CELL / "cell.json", 7)
    for args in (["show", f"{run}/{CELL}"], ["report", str(run)]):
        res = orch(tmp_path, *args)
        assert res.returncode == 2, (args, res.stderr)
        assert "was written by a newer orch (schema 7, this orch reads up to" in res.stderr
        assert res.stderr.rstrip().endswith("; upgrade orch")


def test_a_newer_packed_run_is_named_by_its_archive(tmp_path: Path) -> None:
    run = write_run(tmp_path / "results", "r1", tmp_path)
    make_newer(run / "run.json")
    archive = pack(run, tmp_path / "r1.tar.gz")
    res = orch(tmp_path, "show", str(archive))
    assert res.returncode == 2
    assert f"error: bundle {archive} was written by a newer orch" in res.stderr


def test_runs_lists_a_newer_run_without_failing_the_others(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_run(results, "r1", tmp_path)
    make_newer(write_run(results, "r2", tmp_path) / "run.json")
    res = orch(tmp_path, "runs", str(results))
    assert res.returncode == 0, res.stderr
    assert "r1" in res.stdout
    assert "r2" in res.stderr and "newer orch" in res.stderr


def test_the_probe_writes_the_shape_the_reader_declares() -> None:
    # one table, one field list: the probe's own names are the declared ones, not copies
    assert probe_parse.GPU_FIELDS is probe_shape.GPU_FIELDS
    assert probe_parse.REASON_FIELD == probe_shape.REASON_FIELD
    assert probe_parse.CLOCK_EVENT_REASONS is probe_shape.CLOCK_EVENT_REASONS
    assert probe_parse.decode_clock_event_reasons is probe_shape.decode_clock_event_reasons
    assert probe_gpu.GPU_FIELDS is probe_shape.GPU_FIELDS  # what nvidia-smi is asked for
    decode = probe_shape.decode_clock_event_reasons
    assert decode("0x0000000000000048") == ["hw_slowdown", "hw_thermal_slowdown"]
    assert decode("0x0000000000001004") == ["sw_power_cap", "bit_0x1000"]
    assert decode(None) is None and decode("?") is None
    assert probe_shape.nvml_name("hw_thermal_slowdown") == "HwThermalSlowdown"


def test_a_snapshot_from_the_fake_smi_has_the_declared_keys(smi_bin: Path, tmp_path: Path) -> None:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi" / "h100-throttled"
    env = {"PATH": f"{smi_bin}:/usr/bin:/bin", "FAKE_NVIDIA_SMI_DIR": str(fixture)}
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.runner", "probe", "--no-pip-freeze", "--no-topo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    snap = json.loads(out.stdout)
    gpus = snap[probe_shape.GPUS][probe_shape.GPU_DEVICES]
    assert gpus and set(probe_shape.GPU_FIELDS) <= set(gpus[0])
    assert gpus[3][probe_shape.REASON_NAMES_FIELD] == ["hw_slowdown", "hw_thermal_slowdown"]
    for _label, path in probe_shape.SYSTEM_FIELDS:
        assert path[0] in snap, path
