"""Preflight refuses GPUs that other processes hold: the simulated nvidia-smi first on PATH lists
a stray process registered in its state, a real runner refuses the cell naming its pid, memory
and GPU, `preflight: {gpus_busy: warn}` goes on and records it, the pre-start snapshot lists it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from runner_helpers import cell_dir, free_port, load, make_cell, run_cell

from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import register_app, write_host_state


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The simulated nvidia-smi first on the runner's PATH (2 GPUs); its state file."""
    state = write_host_state(tmp_path / "state.json", gpu_count=2)
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable, state=state)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("ORCH_SIM_STATE", raising=False)
    return state


@pytest.fixture
def stray(fake_smi: Path) -> Iterator[int]:
    """A live process that the fake nvidia-smi lists on GPU 1 with 43,000 MiB."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    register_app(fake_smi, proc.pid, 1, 43000, "python")
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_foreign_gpu_process_refuses_the_cell(home: Path, stray: int) -> None:
    runner = run_cell(home, make_cell(free_port(), repeats=1))
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "preflight", done
    reason = done["reason"]
    assert f"pid {stray} (python) holds 43000 MiB on GPU 1" in reason, reason
    assert "gpus_busy: warn" in reason


def test_gpus_busy_warn_goes_on_and_records_the_process(home: Path, stray: int) -> None:
    cell = make_cell(free_port(), repeats=1)
    cell["preflight"] = {"gpus_busy": "warn"}
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    doc = load(cell_dir(home) / "cell.json")
    gpus = doc["steps"]["preflight"]["detail"]["gpus"]
    assert gpus["busy"] is True and gpus["policy"] == "warn"
    assert [(a["pid"], a["gpu"], a["used_memory_mib"]) for a in gpus["apps"]] == [(stray, 1, 43000)]
    assert {g["index"]: g["memory_used_mib"] for g in gpus["gpus"]} == {0: 0, 1: 43000}
    pre = load(cell_dir(home) / "snapshot.pre.json")
    assert [a["pid"] for a in pre["compute_apps"]] == [stray]


def test_a_process_on_a_gpu_the_cell_does_not_use_is_not_in_the_way(home: Path, stray: int) -> None:
    runner = run_cell(home, make_cell(free_port(), repeats=1, env={"CUDA_VISIBLE_DEVICES": "0"}))
    assert runner.done["status"] == "passed", runner.done
    gpus = load(cell_dir(home) / "cell.json")["steps"]["preflight"]["detail"]["gpus"]
    assert gpus["busy"] is False and [g["index"] for g in gpus["gpus"]] == [0]


def test_memory_held_by_no_listed_process_is_busy_too(home: Path, fake_smi: Path) -> None:
    write_host_state(fake_smi, gpu_count=2, memory_used_mib=20000)  # another container's
    runner = run_cell(home, make_cell(free_port(), repeats=1))
    assert runner.done["status"] == "failed", runner.done
    assert "GPU 0 has 20000 MiB in use by no listed process" in runner.done["reason"]


def test_no_nvidia_smi_is_nothing_to_check(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # the server and bench run by absolute paths
    runner = run_cell(home, make_cell(free_port(), repeats=1))
    assert runner.done["status"] == "passed", runner.done
    gpus = load(cell_dir(home) / "cell.json")["steps"]["preflight"]["detail"]["gpus"]
    assert gpus == {"checked": False, "note": "nvidia-smi not found on PATH"}
