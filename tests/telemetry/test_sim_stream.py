"""`orch sim nvidia-smi -lms N`: a line per GPU every N ms until killed, power following the
simulated load, clocks and reasons following the state file's scheduled throttle episodes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import register_app, write_host_state


def _stream(bin_dir: Path, state: Path, seconds: float, *args: str) -> list[str]:
    env = {**os.environ, "ORCH_SIM_STATE": str(state)}
    proc = subprocess.Popen(
        [str(bin_dir / "nvidia-smi"), *args], stdout=subprocess.PIPE, text=True, env=env
    )
    time.sleep(seconds)
    proc.terminate()
    out, _ = proc.communicate(timeout=10)
    return out.splitlines()


def test_power_follows_the_load_and_the_header_comes_once(tmp_path: Path) -> None:
    state = write_host_state(tmp_path / "s.json", gpu_count=2, load_power_draw=650.0)
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable)
    # A live process registered on GPU 1, as a running sim server's worker is.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        register_app(state, sleeper.pid, 1, 1000, "python")
        lines = _stream(
            tmp_path / "bin",
            state,
            1.5,
            "--query-gpu=index,power.draw,utilization.gpu",
            "--format=csv,nounits",
            "--loop-ms=200",
        )
        single = subprocess.run(
            [str(tmp_path / "bin" / "nvidia-smi"), "--query-gpu=power.draw", "--format=csv"],
            capture_output=True,
            text=True,
            env={**os.environ, "ORCH_SIM_STATE": str(state)},
            check=True,
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert lines[0] == "index, power.draw [W], utilization.gpu [%]"
    assert lines.count(lines[0]) == 1
    rows = [line.split(", ") for line in lines[1:]]
    assert len(rows) >= 6 and len(rows) % 2 == 0
    assert {tuple(r) for r in rows if r[0] == "0"} == {("0", "118.50", "0")}
    assert {tuple(r) for r in rows if r[0] == "1"} == {("1", "650.00", "97")}
    # A single query keeps the state file's values, so snapshots stay comparable.
    assert single.stdout.splitlines()[1:] == ["118.50 W", "118.50 W"]


def test_an_episode_after_the_server_loads_drops_clock_and_power(tmp_path: Path) -> None:
    state = write_host_state(
        tmp_path / "s.json",
        gpu_count=1,
        throttle_episodes=[{"after_load": 0.5, "duration": 0.6, "reason": "sw_power_cap"}],
    )
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable)
    query = "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.active"
    proc = subprocess.Popen(
        [
            str(tmp_path / "bin" / "nvidia-smi"),
            query,
            "--format=csv,noheader,nounits",
            "-lms",
            "100",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "ORCH_SIM_STATE": str(state)},
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline().strip()]  # streaming before any server loads a GPU
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        register_app(state, sleeper.pid, 0, 1000, "python")
        time.sleep(2.0)
        proc.terminate()
        lines += proc.communicate(timeout=10)[0].splitlines()
    finally:
        sleeper.kill()
        sleeper.wait()
    rows = [line.split(", ") for line in lines]
    assert rows[0] == ["1980", "118.50", "0x0000000000000000"]
    throttled = [r for r in rows if r[2] != "0x0000000000000000"]
    assert throttled and {r[2] for r in throttled} == {"0x0000000000000004"}
    # Default episode clock: 60% of the maximum; power falls with the clock.
    assert {r[0] for r in throttled} == {"1188"}
    assert ["1980", "560.00", "0x0000000000000000"] in rows
    assert float(throttled[0][1]) < 560.0
    # Before, during, after: the episode is one contiguous stretch in the middle.
    flags = [r in throttled for r in rows]
    first, last = flags.index(True), len(flags) - 1 - flags[::-1].index(True)
    assert all(flags[first : last + 1]) and not flags[-1]
    assert 3 <= last - first + 1 <= 9  # 0.6 s at 100 ms, one tick either way and then some


def test_a_bad_loop_value_is_a_usage_error(tmp_path: Path) -> None:
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable)
    out = subprocess.run(
        [str(tmp_path / "bin" / "nvidia-smi"), "--query-gpu=index", "--format=csv", "-lms", "x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and "-lms" in out.stdout
