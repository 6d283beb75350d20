"""The fake nvidia-smi: fields in the order asked, the state's clocks, the real tool's errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import register_app, write_host_state


def smi(bin_dir: Path, *args: str, state: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ORCH_SIM_STATE"}
    if state is not None:
        env["ORCH_SIM_STATE"] = str(state)
    return subprocess.run(
        [str(bin_dir / "nvidia-smi"), *args], capture_output=True, text=True, env=env, check=False
    )


def test_query_fields_in_order_with_a_throttled_gpu(tmp_path: Path) -> None:
    state = write_host_state(
        tmp_path / "state.json",
        throttle_reasons="0x0000000000000008",
        gpus={"2": {"sm_clock": 1005, "power_draw": 690.0}},
    )
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable)
    fields = "clocks.max.sm,index,clocks.sm,clocks_event_reasons.active,name,power.draw"
    out = smi(
        tmp_path / "bin", f"--query-gpu={fields}", "--format=csv,noheader,nounits", state=state
    )
    assert out.returncode == 0, out.stdout
    rows = [line.split(", ") for line in out.stdout.splitlines()]
    assert len(rows) == 8
    assert rows[0] == ["1980", "0", "1980", "0x0000000000000008", "NVIDIA H200", "118.50"]
    assert rows[2] == ["1980", "2", "1005", "0x0000000000000008", "NVIDIA H200", "690.00"]


def test_header_units_ids_and_old_names(tmp_path: Path) -> None:
    state = write_host_state(tmp_path / "s.json", driver_version="535.54.03")
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable, state=state)
    out = smi(
        tmp_path / "bin",
        "--query-gpu",
        "index,memory.total,pcie.link.gen.current,clocks_throttle_reasons.active",
        "--format=csv",
        "-i",
        "1",
    )
    assert out.returncode == 0
    assert out.stdout.splitlines() == [
        "index, memory.total [MiB], pcie.link.gen.current, clocks_throttle_reasons.active",
        "1, 143771 MiB, 5, 0x0000000000000000",
    ]


def test_unknown_field_fails_like_the_real_tool(tmp_path: Path) -> None:
    state = write_host_state(tmp_path / "s.json", nvidia_smi_fields="old")
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable)
    out = smi(tmp_path / "bin", "--query-gpu=index,ecc", "--format=csv,noheader", state=state)
    assert out.returncode == 2
    assert 'Field "ecc" is not a valid field to query.' in out.stdout
    # An old driver rejects the new name; the old name works.
    newer = smi(
        tmp_path / "bin",
        "--query-gpu=clocks_event_reasons.active",
        "--format=csv,noheader",
        state=state,
    )
    assert newer.returncode == 2
    older = smi(
        tmp_path / "bin",
        "--query-gpu=clocks_throttle_reasons.active",
        "--format=csv,noheader",
        state=state,
    )
    assert older.returncode == 0


def test_bare_topo_and_compute_apps(tmp_path: Path) -> None:
    state = write_host_state(tmp_path / "s.json", driver_version="570.86.15", cuda_version="12.8")
    install_fake_nvidia_smi(tmp_path / "bin", sys.executable)
    bare = smi(tmp_path / "bin", state=state)
    assert "Driver Version: 570.86.15" in bare.stdout
    assert "CUDA Version: 12.8" in bare.stdout
    topo = smi(tmp_path / "bin", "topo", "-m", state=state)
    assert topo.stdout.splitlines()[1].startswith("GPU0\t X \tNV18")
    register_app(state, os.getpid(), 3, 120000, "python")
    register_app(state, 999_999_999, 0, 1, "gone")  # a dead pid is not listed
    apps = smi(
        tmp_path / "bin",
        "--query-compute-apps=pid,used_memory,gpu_bus_id",
        "--format=csv,noheader,nounits",
        state=state,
    )
    assert apps.stdout.splitlines() == [f"{os.getpid()}, 120000, 00000000:5D:00.0"]
    used = smi(
        tmp_path / "bin", "--query-gpu=memory.used", "--format=csv,noheader,nounits", state=state
    )
    assert used.stdout.splitlines()[3] == "120000"
