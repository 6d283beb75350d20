"""A stray GPU process on a real sshd host (issue 11 item 13): the simulated nvidia-smi lists a
process registered in the host's state; `orch apply` refuses the cell at preflight naming it,
`preflight: {gpus_busy: warn}` runs it and records it, and `orch diff` against a clean run names
the processes and memory held before the server started."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from bundle_helpers import apply, cell_dirs, ok, orch, read_json, section_order
from bundle_helpers import sim_playbook as make_playbook
from sim_helpers import free_port
from sshhosts import SSHTestHosts

from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import apps_dir, register_app, write_host_state

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

HOST = "host3"


@pytest.fixture
def stray_host(ssh_hosts: SSHTestHosts, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """host3 with a fake nvidia-smi; (inventory, state file); both removed afterwards."""
    host = ssh_hosts.host(HOST)
    smi = install_fake_nvidia_smi(host.bin_dir, sys.executable)
    write_host_state(host.state_file)
    inventory = ssh_hosts.write_inventory(tmp_path / "hosts.yml")
    try:
        yield inventory, host.state_file
    finally:
        smi.unlink(missing_ok=True)
        host.state_file.unlink(missing_ok=True)
        shutil.rmtree(apps_dir(host.state_file), ignore_errors=True)


def test_a_stray_gpu_process_is_refused_warned_and_named(
    stray_host: tuple[Path, Path], tmp_path: Path
) -> None:
    inventory, state = stray_host
    results = tmp_path / "results"
    playbook = make_playbook(
        tmp_path / "pb.yml", name="e2e-stray", port=free_port(), repo=None, repeats=1
    )
    inv = ("-i", str(inventory), "--limit", HOST)
    clean = apply(playbook, results, *inv, home=tmp_path)

    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        register_app(state, stray.pid, 1, 43000, "python")
        refused = apply(playbook, results, *inv, home=tmp_path, code=1)
        (cell,) = cell_dirs(refused)
        doc = read_json(cell / "cell.json")
        assert doc["failed_step"] == "preflight", doc
        assert f"pid {stray.pid} (python) holds 43000 MiB on GPU 1" in doc["reason"]

        data = yaml.safe_load(playbook.read_text())
        data["preflight"] = {"gpus_busy": "warn"}
        playbook.write_text(yaml.safe_dump(data, sort_keys=False))
        busy = apply(playbook, results, *inv, home=tmp_path)
    finally:
        stray.kill()
        stray.wait()
    (cell,) = cell_dirs(busy)
    doc = read_json(cell / "cell.json")
    assert doc["status"] == "passed" and doc["cell"]["preflight"] == {"gpus_busy": "warn"}
    assert doc["steps"]["preflight"]["detail"]["gpus"]["busy"] is True

    out = ok(orch("diff", str(clean), str(busy), home=tmp_path))
    assert "1 cell pairs (1 by id" in out, out  # the policy is not in the cell id
    assert section_order(out)[0] == "hardware", out
    assert "GPU processes before start: none -> 1 holding 43000 MiB" in out, out
    assert "GPU 1 memory.used before start: 0 -> 43000" in out, out
