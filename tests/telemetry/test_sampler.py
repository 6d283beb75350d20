"""The host-side sampler against the simulated nvidia-smi on PATH: a real streaming child, real
files; a scheduled throttle episode comes out of the CSV with its reason and duration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.analyze.energy import (
    RepeatWindow,
    read_telemetry,
    throttle_episodes,
    window_metrics,
)
from orchestrator.runner.telemetry import TELEMETRY_CSV, TELEMETRY_JSON, Sampler
from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import write_host_state

REPO = Path(__file__).resolve().parents[2]


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def sim_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake nvidia-smi first on PATH, reading tmp_path/state.json."""
    state = tmp_path / "state.json"
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable, state=state)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("ORCH_SIM_STATE", raising=False)
    return state


def test_a_scheduled_episode_is_found_with_its_reason_and_duration(
    sim_path: Path, tmp_path: Path
) -> None:
    interval = 0.25
    t0 = time.time()
    write_host_state(
        sim_path,
        gpu_count=4,
        throttle_episodes=[
            {"at": t0 + 1.0, "duration": 1.0, "reason": "sw_thermal_slowdown", "sm_clock": 1100,
             "gpus": [1, 2]}
        ],
    )  # fmt: skip
    sampler = Sampler()
    sampler.start(str(tmp_path / "cell"), interval)
    time.sleep(3.2)
    info = sampler.stop()
    assert info["enabled"] is True and info["off"] is None, info
    assert json.loads((tmp_path / "cell" / TELEMETRY_JSON).read_text())["rows"] == info["rows"]
    assert info["rows"] >= 4 * 8

    tel = read_telemetry(tmp_path / "cell" / TELEMETRY_CSV)
    assert sorted(tel.gpus) == [0, 1, 2, 3]
    # Stamped at read on time.time(): inside the sampling span, in order.
    assert all(t0 <= t <= time.time() for t in tel.gpus[0].t)
    assert tel.gpus[0].t == sorted(tel.gpus[0].t)

    measured = RepeatWindow("measure", 1, t0 + 0.5, t0 + 2.5)
    (episode,) = throttle_episodes(tel, [measured])
    assert episode.reasons == ("sw_thermal_slowdown",)
    assert episode.gpus == (1, 2)
    assert abs(episode.seconds - 1.0) <= interval + 0.05
    assert abs(episode.start - (t0 + 1.0)) <= interval + 0.05
    assert episode.sm_clock_min_mhz == 1100
    assert episode.clock_drop_mhz == 1980 - 1100
    assert episode.measured_repeats == (1,)
    assert abs(episode.measured_overlap_s - 1.0) <= interval + 0.05

    metrics = window_metrics(tel, measured)
    assert metrics["sm_clock_min_mhz"] == 1100
    assert abs(metrics["throttle_s.sw_thermal_slowdown"] - 1.0) <= interval + 0.05
    assert metrics["sm_clock_mean_mhz"] < 1980


def test_old_drivers_get_the_old_reason_name_under_the_same_column(
    sim_path: Path, tmp_path: Path
) -> None:
    write_host_state(sim_path, gpu_count=2, nvidia_smi_fields="old", throttle_reasons="0x4")
    sampler = Sampler()
    sampler.start(str(tmp_path / "cell"), 0.2)
    time.sleep(1.5)
    info = sampler.stop()
    assert info["enabled"] and info["legacy_names"] is True, info
    text = (tmp_path / "cell" / TELEMETRY_CSV).read_text()
    assert text.splitlines()[0].endswith(",clocks_event_reasons.active")
    assert text.splitlines()[1].endswith(",0x4")


def test_no_nvidia_smi_turns_telemetry_off_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    sampler = Sampler()
    sampler.start(str(tmp_path / "cell"), 1.0)
    time.sleep(0.3)
    info = sampler.stop()
    assert info["enabled"] is False
    assert "cannot run nvidia-smi" in info["off"]
    assert json.loads((tmp_path / "cell" / TELEMETRY_JSON).read_text())["off"] == info["off"]


def test_a_failing_query_is_recorded_not_raised(sim_path: Path, tmp_path: Path) -> None:
    write_host_state(sim_path, gpu_count=1)
    sampler = Sampler()
    sampler.start(str(tmp_path / "cell"), 0.2, ["clocks.sm", "no.such.field"])
    time.sleep(1.5)
    info = sampler.stop()
    assert info["enabled"] is False
    assert "rc 2" in info["off"] and "no.such.field" in info["off"]


def test_stop_ends_the_child(sim_path: Path, tmp_path: Path) -> None:
    write_host_state(sim_path, gpu_count=1)
    sampler = Sampler()
    sampler.start(str(tmp_path / "cell"), 0.2)
    deadline = time.monotonic() + 10
    while sampler.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = sampler.pid
    assert pid is not None
    sampler.stop()
    assert _gone(pid)
    assert sampler.stop()["enabled"] is True  # a second stop is harmless


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_the_child_ends_with_the_process_that_started_it(
    sim_path: Path, tmp_path: Path, how: str
) -> None:
    write_host_state(sim_path, gpu_count=1)
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from orchestrator.runner.telemetry import Sampler
        s = Sampler()
        s.start({str(tmp_path / "cell")!r}, 0.1)
        while s.pid is None:
            time.sleep(0.02)
        print(s.pid, flush=True)
        time.sleep(0.5)
        if {how!r} == "sigkill":
            os.kill(os.getpid(), 9)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    rc = proc.wait(timeout=30)
    assert rc == (-signal.SIGKILL if how == "sigkill" else 0)
    assert _gone(child), f"nvidia-smi {child} outlived its sampler ({how})"


def test_a_wrapper_without_exec_is_stopped_whole(sim_path: Path, tmp_path: Path) -> None:
    """Issue 23 item 19: an nvidia-smi that is a shell script without `exec` added 5 s to every
    cell: only the shell was killed, and its child held the pipe the sampler reads."""
    write_host_state(sim_path, gpu_count=1)
    real = tmp_path / "bin" / "nvidia-smi"
    wrapped = tmp_path / "bin" / "nvidia-smi.real"
    real.rename(wrapped)
    real.write_text(f'#!/bin/sh\n"{wrapped}" "$@"\n')  # no exec: the shell waits for its child
    real.chmod(0o755)
    sampler = Sampler()
    sampler.start(str(tmp_path / "cell"), 0.2)
    deadline = time.monotonic() + 10
    while sampler.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    started = time.monotonic()
    sampler.stop()
    assert time.monotonic() - started < 4  # was the 5 s of a reader waiting on the child
    assert not [p for p in _children_named(wrapped.name)]


def _children_named(name: str) -> list[int]:
    """Pids whose command line names `name` (the wrapped fake nvidia-smi still running)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if name.encode() in cmdline:
                found.append(int(entry.name))
    return found
