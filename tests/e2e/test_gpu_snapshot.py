"""The GPU path end to end on a real sshd host: a fake `nvidia-smi` (orch sim) first on the host's
PATH reads a host state file in which one GPU is throttled; `orch facts` shows it, `orch apply`
records it in the cell's snapshots, and after the GPU recovers `orch diff` names the change.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from bundle_helpers import apply, cell_dirs, ok, orch, read_json, section_order
from bundle_helpers import sim_playbook as make_playbook
from sim_helpers import free_port
from sshhosts import SSHTestHost, SSHTestHosts

from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import apps_dir, write_host_state

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

HOST = "host3"
SLOW_GPU = 3
THROTTLED = {str(SLOW_GPU): {"sm_clock": 1095, "pcie_gen": 4, "throttle_reasons": "0x8"}}


@dataclass
class GpuHost:
    host: SSHTestHost
    inventory: Path
    tmp: Path


@pytest.fixture
def gpu_host(ssh_hosts: SSHTestHosts, tmp_path: Path) -> Iterator[GpuHost]:
    """host3 with a fake nvidia-smi and one throttled GPU; both removed afterwards."""
    host = ssh_hosts.host(HOST)
    smi = install_fake_nvidia_smi(host.bin_dir, sys.executable)
    write_host_state(host.state_file, gpus=THROTTLED)
    inventory = ssh_hosts.write_inventory(tmp_path / "hosts.yml")
    try:
        yield GpuHost(host, inventory, tmp_path)
    finally:
        smi.unlink(missing_ok=True)
        host.state_file.unlink(missing_ok=True)
        shutil.rmtree(apps_dir(host.state_file), ignore_errors=True)


def _facts(gpu: GpuHost, *more: str) -> str:
    return ok(orch("facts", "-i", str(gpu.inventory), "--limit", HOST, *more, home=gpu.tmp))


def test_facts_show_the_gpus_and_flag_the_throttled_one(gpu_host: GpuHost) -> None:
    data = json.loads(_facts(gpu_host, "--json"))
    facts = data[HOST]
    assert facts["hostname"] == HOST or not gpu_host.host.namespace
    gpus = facts["gpus"]
    assert gpus["count"] == 8 and len(gpus["devices"]) == 8
    slow, fast = gpus["devices"][SLOW_GPU], gpus["devices"][0]
    assert slow["index"] == SLOW_GPU and slow["name"] == "NVIDIA H200"
    assert (slow["clocks.sm"], slow["clocks.max.sm"]) == (1095, 1980)
    assert fast["clocks.sm"] == 1980
    gen = slow.get("pcie.link.gen.gpucurrent", slow.get("pcie.link.gen.current"))
    assert (gen, slow["pcie.link.gen.max"]) == (4, 5)
    assert slow["clocks_event_reasons.active"].endswith("8")
    assert slow["clocks_event_reasons.names"] == ["hw_slowdown"], slow
    for field in ("power.draw", "power.limit", "temperature.gpu", "persistence_mode",
                  "ecc.mode.current", "memory.total", "pcie.link.width.current"):  # fmt: skip
        assert field in slow, (field, sorted(slow))
    assert facts["driver"]["version"] == "570.133.20"
    assert facts["cuda"]["driver"] == "12.8"

    table = _facts(gpu_host)
    (row,) = [line for line in table.splitlines() if line.startswith(HOST)]
    assert "8x NVIDIA H200" in row and "570.133.20" in row, table
    assert f"gpu{SLOW_GPU}: hw_slowdown, sm 1095/1980 MHz, pcie gen4/5" in row, table
    assert "55%" in row, table  # sm 1095 of 1980 MHz
    assert "gpu0" not in row


def test_apply_records_the_gpus_and_diff_names_the_recovery(gpu_host: GpuHost) -> None:
    results = gpu_host.tmp / "results"
    playbook = make_playbook(
        gpu_host.tmp / "gpu.yml", name="e2e-gpu", port=free_port(), repo=None, repeats=2
    )
    inv = ("-i", str(gpu_host.inventory), "--limit", HOST)
    throttled = apply(playbook, results, *inv, home=gpu_host.tmp)
    (cell,) = cell_dirs(throttled)
    pre = read_json(cell / "snapshot.pre.json")
    slow = pre["gpus"]["devices"][SLOW_GPU]
    assert slow["clocks.sm"] == 1095 and slow["clocks.max.sm"] == 1980
    assert slow["pcie.link.gen.max"] == 5
    assert pre["driver"]["version"] == "570.133.20"
    facts = read_json(throttled / "hosts" / HOST / "facts.json")
    assert facts["gpus"]["devices"][SLOW_GPU]["clocks.sm"] == 1095

    write_host_state(gpu_host.host.state_file)  # every GPU back at max clock, PCIe gen 5
    recovered = apply(playbook, results, *inv, home=gpu_host.tmp)

    out = ok(orch("diff", str(throttled), str(recovered), home=gpu_host.tmp))
    assert "1 cell pairs (1 by id" in out, out
    order = section_order(out)
    assert order[0] == "hardware", out  # the only cause section that differs
    assert "code" not in order and "environment" not in order, out
    lines = [line.strip() for line in out.splitlines()]
    sm = next(line for line in lines if line.startswith(f"GPU {SLOW_GPU} clocks.sm:"))
    assert "1095 -> 1980" in sm and "A below max (1095 of max 1980)" in sm, sm
    gen = next(line for line in lines if line.startswith(f"GPU {SLOW_GPU} pcie.link.gen.current"))
    assert "4 -> 5" in gen and "A below max" in gen, gen
    reasons = next(x for x in lines if x.startswith(f"GPU {SLOW_GPU} clocks_event_reasons"))
    assert "HwSlowdown" in reasons, reasons
    assert not any(line.startswith("GPU 0 ") for line in lines), out

    data = json.loads(ok(orch("diff", str(throttled), str(recovered), "--json",
                              home=gpu_host.tmp)))  # fmt: skip
    (pair,) = data["pairs"]
    assert pair["differing"][0] == "hardware", pair["differing"]
    hardware = next(s for s in pair["sections"] if s["name"] == "hardware")
    keys = {e["key"]: (e["a"], e["b"]) for e in hardware["entries"]}
    assert keys[f"GPU {SLOW_GPU} clocks.sm"] == (1095, 1980)
