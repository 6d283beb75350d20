"""Telemetry end to end on localhost: `orch apply` of a simulator cell with the fake nvidia-smi
first on PATH, whose host state schedules a power-cap throttle episode once the server holds the
GPUs. The episode shows in the cell's telemetry.csv, in its measured repeats' metrics, and first
in `orch diff` against the same cell run unthrottled; `orch report` has an energy column, and
`--plot` draws the cell's telemetry strip."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bundle_helpers import cell_dirs, ok, orch, read_json, section_order, write_yaml
from bundle_helpers import sim_playbook as make_playbook
from sim_helpers import free_port

from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import apps_dir, write_host_state

pytestmark = [pytest.mark.slow]

CAPPED_MHZ = 1100
# The cap starts as soon as the server holds its GPUs and outlasts the bench (the simulated
# server and bench at time scale 0.02 take a few seconds a cell).
EPISODE = {"after_load": 0.0, "duration": 600.0, "reason": "sw_power_cap",
           "sm_clock": CAPPED_MHZ, "gpus": [1]}  # fmt: skip


@dataclass
class Host:
    tmp: Path
    home: Path
    state: Path
    env: dict[str, str]
    playbook: Path


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    """The fake nvidia-smi on PATH (2 GPUs), reading a state file the server registers in."""
    state = write_host_state(tmp_path / "state.json", gpu_count=2)
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable, state=state)
    env = {
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "ORCH_SIM_STATE": str(state),
    }
    playbook = make_playbook(
        tmp_path / "pb.yml", name="e2e-telemetry", port=free_port(), repo=None, repeats=2
    )
    data = _yaml(playbook)
    data["telemetry"] = {"interval": 0.1}
    # A warm-up repeat between the server's load (the cap's start) and the first measured one:
    # the cap is seen at the first sample after the load, which without it can land a few ms
    # inside repeat 1 (the bench starts as soon as the server is ready) and cut its throttle_s.
    data["bench"]["warmup"] = 1
    write_yaml(playbook, data)
    try:
        yield Host(tmp_path, tmp_path / "home", state, env, playbook)
    finally:
        shutil.rmtree(apps_dir(state), ignore_errors=True)


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def _apply(host: Host) -> Path:
    results = host.tmp / "results"
    before = {p.name for p in results.iterdir()} if results.is_dir() else set()
    ok(orch("apply", str(host.playbook), "--results", str(results), home=host.home, env=host.env))
    (run,) = [p for p in results.iterdir() if p.is_dir() and p.name not in before]
    return run


def test_a_throttle_episode_shows_in_telemetry_metrics_and_first_in_diff(host: Host) -> None:
    calm = _apply(host)
    write_host_state(host.state, gpu_count=2, throttle_episodes=[EPISODE])
    capped = _apply(host)

    (cell,) = cell_dirs(capped)
    with (cell / "telemetry.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    gpu1 = [(r["clocks_event_reasons.active"], r["clocks.sm"]) for r in rows if r["index"] == "1"]
    # sampling starts before the server holds the GPUs, then the cap lasts to the end
    assert gpu1[0] == ("0x0", "1980") and gpu1[-1] == ("0x4", str(CAPPED_MHZ)), gpu1
    assert {r["clocks_event_reasons.active"] for r in rows if r["index"] == "0"} == {"0x0"}
    assert read_json(cell / "cell.json")["telemetry"]["enabled"] is True

    metrics = read_json(cell / "metrics.json")
    for repeat in metrics["repeats"]:
        seconds = read_json(cell / "bench" / str(repeat["n"]) / "exit.json")["seconds"]
        # sampled from before its start to after its end, and capped all along
        assert repeat["telemetry_coverage"] == pytest.approx(1.0), repeat
        assert repeat["throttle_s"] == pytest.approx(seconds, abs=0.01), repeat
        assert repeat["throttle_s.sw_power_cap"] == repeat["throttle_s"]
        assert repeat["sm_clock_min_mhz"] == CAPPED_MHZ
        assert repeat["energy_j"] > 0 and repeat["joules_per_output_token"] > 0
    (episode,) = metrics["telemetry"]["episodes"]
    assert episode["gpus"] == [1] and episode["reasons"] == ["sw_power_cap"]
    assert episode["measured_repeats"] == [1, 2]
    (calm_cell,) = cell_dirs(calm)
    calm_metrics = read_json(calm_cell / "metrics.json")
    assert all(r["throttle_s"] == 0 for r in calm_metrics["repeats"])
    assert calm_metrics["telemetry"]["episodes"] == []
    # the simulated server runs at the capped GPU's pace (TP waits for its slowest GPU)
    calm_tput = calm_metrics["summary"]["output_throughput"]["median"]
    capped_tput = metrics["summary"]["output_throughput"]["median"]
    print(f"output throughput: calm {calm_tput:.1f}, capped {capped_tput:.1f} tok/s")
    assert capped_tput < 0.85 * calm_tput, (calm_tput, capped_tput)

    out = ok(orch("diff", str(calm), str(capped), home=host.home))
    assert section_order(out)[0] == "hardware", out
    lines = [line.strip() for line in out.splitlines()]
    first = next(i for i, line in enumerate(lines) if line.startswith("[hardware]"))
    # the first entry of the section, A and B on their own lines (long values)
    assert lines[first + 1].startswith("throttled during the run:"), out
    assert "of measured repeats throttled" in lines[first + 1], out
    assert lines[first + 2] == "A: none", out
    b = lines[first + 3]
    assert b.startswith("B: sw_power_cap on GPU 1 for ") and "in measured repeat 1, 2" in b, out
    assert f"SM clock 1980 -> {CAPPED_MHZ} MHz" in b, out

    data = json.loads(ok(orch("diff", str(calm), str(capped), "--json", home=host.home)))
    (pair,) = data["pairs"]
    hardware = next(s for s in pair["sections"] if s["name"] == "hardware")
    assert hardware["entries"][0]["key"] == "throttled during the run"

    plot = host.tmp / "report.png"
    result = orch("report", str(capped), "--plot", str(plot), home=host.home)
    report = ok(result)
    assert "joules_per_output_token" in report.splitlines()[0], report
    if importlib.util.find_spec("matplotlib") is not None:  # orch[plot]
        strips = host.tmp / "report-telemetry.png"
        assert f"telemetry plot: {strips}" in result.stderr, result.stderr
        assert strips.read_bytes().startswith(b"\x89PNG")
