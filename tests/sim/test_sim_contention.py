"""Contention episodes: a busy host slows `sim serve` where nvidia-smi cannot see it.

The scenario itself (an outlying repeat that `orch diff` flags, naming no cause) runs in
tests/e2e/test_diagnosis_scenarios.py; here the knob's windows and its invisibility.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sim import model as m
from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import read_state, write_host_state

QUERY = [
    "--query-gpu=index,clocks.sm,clocks_event_reasons.active,utilization.gpu,power.draw",
    "--format=csv,noheader",
]


def test_request_windows_count_from_the_servers_first_request() -> None:
    state = m.host_state(
        {
            "contention_episodes": [
                {"after_requests": 2, "requests": 2, "slowdown": 1.5},
                {"after_requests": 3, "requests": 1, "slowdown": 4.0},
            ]
        }
    )
    slowdowns = [m.contention_slowdown(state, n, None) for n in range(1, 7)]
    # requests 3 and 4 are slowed; request 4 is in both episodes: the larger slowdown wins
    assert slowdowns == [1.0, 1.0, 1.5, 4.0, 1.0, 1.0]


def test_time_windows_are_simulated_seconds_after_load() -> None:
    state = m.host_state({"contention_episodes": [{"after_load_s": 10, "duration_s": 5}]})
    assert m.contention_slowdown(state, 1, None) == 1.0  # not loaded yet
    assert m.contention_slowdown(state, 1, 9.9) == 1.0
    assert m.contention_slowdown(state, 1, 10.0) == 2.0  # the default slowdown
    assert m.contention_slowdown(state, 1, 15.0) == 1.0
    assert m.contention_slowdown(m.host_state(), 5, 12.0) == 1.0  # no episodes


def test_throttle_slowdown_is_the_slowest_used_gpu() -> None:
    episode = {"at": 100.0, "duration": 10.0, "sm_clock": 990, "gpus": [1]}
    state = m.host_state({"throttle_episodes": [episode]})
    assert m.throttle_slowdown(state, 1, 105.0, None) == 1.0  # GPU 1 is not used at tp 1
    assert m.throttle_slowdown(state, 2, 105.0, None) == pytest.approx(2.0)
    assert m.throttle_slowdown(state, 2, 111.0, None) == 1.0


def test_nvidia_smi_cannot_see_contention(tmp_path: Path) -> None:
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable)
    busy = write_host_state(
        tmp_path / "busy.json",
        contention_episodes=[{"after_load_s": 0, "duration_s": 1e9, "slowdown": 4.0}],
    )
    assert m.contention_slowdown(read_state(busy), 1, 1.0) == 4.0  # active now
    quiet = write_host_state(tmp_path / "quiet.json")
    seen = []
    for state in (quiet, busy):
        env = {**os.environ, "ORCH_SIM_STATE": str(state)}
        done = subprocess.run(
            [str(tmp_path / "bin" / "nvidia-smi"), *QUERY],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        seen.append(done.stdout)
    assert seen[0] == seen[1] and "1980 MHz" in seen[0]
