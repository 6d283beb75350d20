"""Multi-node cells on the real sshd test hosts: one simulated SGLang server over host1 (the head)
and host2, joined over real TCP between their network namespaces (loopback otherwise)."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_helpers import link, processes, unlink
from sim_helpers import BENCH, SERVE, free_port, load, only_run, orch
from simprocs import sim_processes
from sshhosts import SSHTestHosts

from orchestrator.sim import model as m

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

TP = 2  # one TP rank per node
NCCL = {"NCCL_ALGO": "Ring", "NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "INFO"}
DIST_PORT = free_port()  # where node 1 joins the head (a plain number: templates see it)


def _playbook(
    path: Path,
    *,
    prompts: int = 2,
    output_len: int = 32,
    bind: str | None = None,
    ready_timeout: float = 60,
) -> Path:
    # Every process of this test's cells carries MN_TEST=<its folder>: other tests' are not ours.
    data: dict[str, Any] = {
        "name": "two-node",
        "hosts": "host1,host2",
        "matrix": {"spec": ["off"]},
        "env": [
            {"ORCH_SIM_TIME_SCALE": "0.02", "ORCH_SIM_SEED": "7", "MN_TEST": path.parent.name},
            NCCL,
        ],
        "server": {
            "adapter": "sglang",
            "launcher": SERVE,
            "nodes": 2,
            "dist_port": DIST_PORT,
            "args": {
                "model-path": "/models/Kimi-K2.5",
                "port": "{{ srv_port }}",
                "tp-size": TP,
                "sim-model": "{{ sim_model }}",
                **({"host": bind} if bind else {}),
            },
            "ready": {"timeout": ready_timeout},
            "stop_grace": 5,
        },
        "bench": {
            "adapter": "sglang.bench_serving",
            "launcher": BENCH,
            "args": {
                "dataset-name": "random-ids",
                "random-input-len": 64,
                "random-output-len": output_len,
                "random-range-ratio": 1,
                "num-prompts": prompts,
                "max-concurrency": 1,
            },
            "repeats": 1,
            "timeout": 120,
        },
        "snapshot": {"pip_freeze": False, "topo": False},
        "telemetry": False,
        "timeouts": {"cell": 180},
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def two_nodes(ssh_hosts: SSHTestHosts, tmp_path: Path) -> Iterator[Path]:
    """An inventory where host1 and host2 can form one server; each host's model file."""
    hosts = ssh_hosts
    port = free_port()
    host_vars: dict[str, dict[str, Any]] = {}
    for host in hosts.hosts:
        model = tmp_path / f"model-{host.name}.json"
        model.write_text(m.dump_params(m.model_params()))
        host_vars[host.name] = {"srv_port": port, "sim_model": str(model)}
        if not hosts.isolated:  # hosts share one $HOME: keep their runner state apart
            host_vars[host.name]["orch_workdir"] = f".orch-mn-e2e/{host.name}"
    inventory = hosts.write_inventory(tmp_path / "hosts.yml", extra_host_vars=host_vars)
    cable = link(hosts.host("host1"), hosts.host("host2"))
    try:
        yield inventory
    finally:
        unlink(cable)
        for host in hosts.hosts:
            shutil.rmtree(host.home / ".orch-mn-e2e", ignore_errors=True)


def _apply(tmp_path: Path, inventory: Path, playbook: Path) -> subprocess.CompletedProcess[str]:
    return orch(
        "apply", str(playbook), "-i", str(inventory), "--results", str(tmp_path / "results"),
        cwd=tmp_path, timeout=300,
    )  # fmt: skip


def test_a_two_node_cell_passes_with_every_node_checked(two_nodes: Path, tmp_path: Path) -> None:
    inventory = two_nodes
    plan = orch("plan", str(_playbook(tmp_path / "pb.yml")), "-i", str(inventory), cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "host1+host2" in plan.stdout, plan.stdout

    proc = _apply(tmp_path, inventory, tmp_path / "pb.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = only_run(tmp_path / "results")
    cells = load(run / "run.json")["cells"]
    assert len(cells) == 1
    (cid,) = cells
    cell_dir = run / "cells" / cid
    assert load(cell_dir / "cell.json")["status"] == "passed"
    nodes = load(cell_dir / "nodes.json")
    assert [(n["host"], n["rank"], n["status"]) for n in nodes] == [("host2", 1, "passed")]
    assert nodes[0]["hold"]["released"], nodes  # held until the head's cell ended
    # each node checked its own processes: the server and its one TP worker
    for folder in (cell_dir, cell_dir / "nodes" / "host2"):
        check = load(folder / "env_check.json")
        assert check["ok"] and len(check["processes"]) == 2, check
        assert all(p["vars"]["NCCL_ALGO"]["observed"] == "Ring" for p in check["processes"])
    head_log = (cell_dir / "server.log").read_text()
    assert "node rank 1 joined" in head_log and "--node-rank" not in head_log
    node_log = (cell_dir / "nodes" / "host2" / "server.log").read_text()
    assert "node rank 1 joined the head" in node_log
    assert (cell_dir / "nodes" / "host2" / "snapshot.pre.json").is_file()
    metrics = load(cell_dir / "metrics.json")
    assert metrics["summary"]["output_throughput"]["median"] > 0
    # the argv each node ran: SGLang's multi-node flags, filled in by the adapter
    argv = load(cell_dir / "nodes" / "host2" / "cell.json")["cell"]["server"]["argv"]
    assert argv[argv.index("--node-rank") + 1] == "1" and "--nnodes" in argv
    assert argv[argv.index("--dist-init-addr") + 1].endswith(f":{DIST_PORT}")
    assert sim_processes(load(run / "run.json")["run_id"]) == []


def test_a_simulated_head_serving_on_loopback_passes(two_nodes: Path, tmp_path: Path) -> None:
    """Issue 35: SGLang's head bound to 127.0.0.1 (its `--host` default; here said explicitly,
    since the adapter listens everywhere on a multi-node head): node 1 joins over the network
    and learns from the controller that the head is ready, never from the head's HTTP port."""
    playbook = _playbook(tmp_path / "pb.yml", bind="127.0.0.1", ready_timeout=20)
    started = time.monotonic()
    proc = _apply(tmp_path, two_nodes, playbook)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - started < 30  # before issue 35: failed at the ready timeout
    run = only_run(tmp_path / "results")
    (cid,) = load(run / "run.json")["cells"]
    cell_dir = run / "cells" / cid
    argv = load(cell_dir / "cell.json")["cell"]["server"]["argv"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    node = load(cell_dir / "nodes" / "host2" / "cell.json")["steps"]
    assert node["ready"]["detail"]["url"] is None and node["verify_env"]["status"] == "ok"
    head = load(cell_dir / "cell.json")["steps"]
    assert head["bench"]["start"] >= node["bench"]["start"]
    assert load(cell_dir / "nodes" / "host2" / "env_check.json")["ok"] is True
    assert sim_processes(load(run / "run.json")["run_id"]) == []


def test_a_variable_dropped_on_node_1_only_is_named_with_its_node(
    two_nodes: Path, tmp_path: Path
) -> None:
    inventory = two_nodes
    playbook = _playbook(tmp_path / "pb.yml")
    good = _apply(tmp_path, inventory, playbook)
    assert good.returncode == 0, good.stdout + good.stderr
    good_run = only_run(tmp_path / "results")
    # host2's launcher starts its worker without NCCL_ALGO (the seed's failure, one node only)
    model = yaml.safe_load(inventory.read_text())["all"]["hosts"]["host2"]["sim_model"]
    params = m.model_params()
    params["bugs"] = {"drop_env": ["NCCL_ALGO"]}
    Path(model).write_text(m.dump_params(params))
    proc = _apply(tmp_path, inventory, playbook)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir() and p != good_run]
    (entry,) = load(run / "run.json")["cells"].values()
    assert entry["status"] == "failed"
    assert "node host2 (rank 1)" in entry["reason"] and "NCCL_ALGO" in entry["reason"], entry
    assert entry["failed_step"] == "verify_env"
    (cid,) = load(run / "run.json")["cells"]
    cell_dir = run / "cells" / cid
    # the head's processes had it (when its own check ran before node 1's failure aborted it)
    head_check = cell_dir / "env_check.json"
    assert not head_check.exists() or load(head_check)["ok"] is True
    node_check = load(cell_dir / "nodes" / "host2" / "env_check.json")
    assert [x["name"] for x in node_check["mismatches"]] == ["NCCL_ALGO"]
    assert sim_processes(load(run / "run.json")["run_id"]) == []
    # orch show RUN/CELL names every node: the head first, then node 1 with why it failed
    shown = orch("show", f"{run.name}/{cid}", "--results", str(tmp_path / "results"), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "host      host1 (head, rank 0)" in shown.stdout, shown.stdout
    (node_line,) = [ln for ln in shown.stdout.splitlines() if ln.startswith("  rank 1  host2")]
    assert node_line.split()[3:5] == ["failed", f"{cell_dir / 'nodes' / 'host2'}/"], node_line
    assert "at verify_env: environment mismatch in 1 of 2" in node_line, node_line
    reason = shown.stdout.split("\nreason:\n", 1)[1]  # the cell's reason, naming the node
    assert "node host2 (rank 1)" in reason and "NCCL_ALGO" in reason, shown.stdout

    # orch diff compares node by node: the variable is named with its node, the head unchanged
    diff = orch(
        "diff", good_run.name, run.name, "--results", str(tmp_path / "results"), cwd=tmp_path
    )
    text = diff.stdout
    assert diff.returncode in (0, 1), diff.stderr
    node_env = text.index("environment (as the server processes saw it), node 1 (host2)")
    (missing,) = [ln for ln in text[node_env:].split("\n[", 1)[0].splitlines() if "NCCL_ALGO" in ln]
    assert "<unset> in 1 of 2 processes" in missing, text
    # the head's processes never lost it (its check may not have run: node 1 aborted the cell)
    head_env = text.find("[environment] environment (as the server processes saw it)\n")
    head = text[head_env:node_env] if head_env != -1 else ""
    assert not [ln for ln in head.splitlines() if "NCCL_ALGO" in ln and "<unset>" in ln], text


def test_killing_node_1_mid_bench_fails_the_cell_and_leaves_nothing_running(
    two_nodes: Path, tmp_path: Path
) -> None:
    inventory = two_nodes
    playbook = _playbook(tmp_path / "pb.yml", prompts=40, output_len=256)
    killed: list[int] = []

    def kill_node_part() -> None:
        # host2's server part, once the head's bench client runs
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            procs = processes(tmp_path.name)
            if any(b"orchestrator.sim bench" in cmd for cmd in procs.values()):
                for pid, cmd in procs.items():
                    if b"orchestrator.sim serve" in cmd and b"--node-rank 1" in cmd:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_node_part, daemon=True)
    killer.start()
    proc = _apply(tmp_path, inventory, playbook)
    killer.join(5)
    assert killed, "the node's part was never seen running"
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = only_run(tmp_path / "results")
    (entry,) = load(run / "run.json")["cells"].values()
    assert entry["status"] == "failed"
    assert entry["reason"].startswith("node host2 (rank 1)"), entry
    assert "rc -9" in entry["reason"], entry
    (cid,) = load(run / "run.json")["cells"]
    head = load(run / "cells" / cid / "cell.json")
    assert head["steps"]["bench"]["status"] == "failed", head["steps"]
    assert sim_processes(load(run / "run.json")["run_id"]) == []


def _srv_port(inventory: Path) -> int:
    """The server port the fixture gave every host (one value)."""
    found: set[int] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "srv_port":
                    found.add(int(value))
                else:
                    walk(value)

    walk(yaml.safe_load(inventory.read_text()))
    (port,) = found
    return port


def test_a_head_that_fails_first_keeps_its_reason_and_its_node_stops_with_it(
    ssh_hosts: SSHTestHosts, two_nodes: Path, tmp_path: Path
) -> None:
    """The head's port is taken: the head fails at preflight, its node is released and fails
    with it, and the cell's reason is the head's (not "node host2: the head's cell ended")."""
    if not ssh_hosts.isolated:
        pytest.skip("the hosts share one network: a port held on host1 is held on host2")
    port = _srv_port(two_nodes)
    code = (
        "import socket,sys,time; s=socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(); print('held', flush=True); "
        "time.sleep(120)"
    )
    argv = ssh_hosts.ssh_argv(ssh_hosts.host("host1"), sys.executable, "-c", shlex.quote(code),
                              str(port))  # fmt: skip
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        try:
            proc = _apply(tmp_path, two_nodes, _playbook(tmp_path / "pb.yml"))
        finally:
            holder.kill()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = only_run(tmp_path / "results")
    (entry,) = load(run / "run.json")["cells"].values()
    assert (entry["status"], entry["failed_step"]) == ("failed", "preflight"), entry
    assert entry["reason"].startswith(f"port {port} is already in use"), entry
    assert entry["reason"].endswith("; node host2 (rank 1) stopped with the head"), entry
    (cid,) = load(run / "run.json")["cells"]
    (node,) = load(run / "cells" / cid / "nodes.json")
    assert node["reason"].startswith("the head's cell ended before"), node
    assert sim_processes(load(run / "run.json")["run_id"]) == []


def test_a_killed_controller_then_resume_and_replay(two_nodes: Path, tmp_path: Path) -> None:
    inventory = two_nodes
    playbook = _playbook(tmp_path / "pb.yml", prompts=20, output_len=128)
    data = yaml.safe_load(playbook.read_text())
    data["matrix"] = {"spec": ["a", "b"]}  # two cells; the kill lands in one of them
    playbook.write_text(yaml.safe_dump(data, sort_keys=False))
    results = tmp_path / "results"
    argv = [sys.executable, "-m", "orchestrator", "apply", str(playbook), "-i", str(inventory)]
    log = (tmp_path / "err.log").open("w")
    proc = subprocess.Popen(
        [*argv, "--results", str(results)], cwd=tmp_path, stdout=log, stderr=log
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(b"orchestrator.sim bench" in cmd for cmd in processes(tmp_path.name).values()):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("no bench ever ran")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run = only_run(results)
    run_id = load(run / "run.json")["run_id"]
    # the runners read EOF: every node's part and the head stop by themselves
    deadline = time.monotonic() + 30
    while sim_processes(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sim_processes(run_id) == []

    again = orch(
        "apply", str(playbook), "--resume", run_id, "-i", str(inventory),
        "--results", str(results), cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    cells = load(run / "run.json")["cells"]
    assert len(cells) == 2 and {c["status"] for c in cells.values()} == {"passed"}, cells
    for cid in cells:
        assert load(run / "cells" / cid / "nodes.json")[0]["status"] == "passed"

    cid = sorted(cells)[0]
    replay = orch(
        "replay", f"{run_id}/{cid}", "-i", str(inventory), "--results", str(results), "--yes",
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stdout + replay.stderr
    runs = [p for p in results.iterdir() if p.is_dir() and p != run]
    assert len(runs) == 1
    (entry,) = load(runs[0] / "run.json")["cells"].values()
    assert entry["status"] == "passed"
    assert (runs[0] / "cells" / cid / "nodes" / "host2" / "env_check.json").is_file()
    assert sim_processes(run_id) == []


# A generic server over two nodes: the head serves at once, node 1 only stays up.
GENERIC_SERVER = """
import sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
rank, port = int(sys.argv[1]), int(sys.argv[2])
if rank:
    time.sleep(600)
class Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
HTTPServer(("0.0.0.0", port), Ok).serve_forever()
"""


def test_the_head_measures_only_once_every_node_is_up_and_checked(
    ssh_hosts: SSHTestHosts, two_nodes: Path, tmp_path: Path
) -> None:
    """Issue 23 item 14: with a server that serves at once, the head ran its bench and ended
    while node 2 was still starting, and the cell failed though its bench passed."""
    slow = tmp_path / "slow-python"  # node 2's runner starts seconds after the head's
    slow.write_text(f'#!/bin/sh\nsleep 2\nexec {shlex.quote(sys.executable)} "$@"\n')
    slow.chmod(0o755)
    inventory = yaml.safe_load(two_nodes.read_text())
    inventory["all"]["hosts"]["host2"]["ansible_python_interpreter"] = str(slow)
    two_nodes.write_text(yaml.safe_dump(inventory))
    playbook = {
        "name": "generic-two-node",
        "hosts": "host1,host2",
        "server": {
            "command": ["{{ orch_python }}", "-c", GENERIC_SERVER, "{{ node_rank }}",
                        "{{ srv_port }}"],
            "nodes": 2,
            "port": "{{ srv_port }}",
            "host": "127.0.0.1",
            "ready": {"path": "/", "timeout": 60, "interval": 0.05},
            "stop_grace": 2,
        },
        "bench": {"command": ["{{ orch_python }}", "-c", "print('x 1.0')"],
                  "metrics": {"x": r"x ([0-9.]+)"}},
        "snapshot": {"pip_freeze": False, "topo": False},
        "telemetry": False,
    }  # fmt: skip
    (tmp_path / "pb.yml").write_text(yaml.safe_dump(playbook))
    proc = _apply(tmp_path, two_nodes, tmp_path / "pb.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = only_run(tmp_path / "results")
    (cid,) = load(run / "run.json")["cells"]
    cell = load(run / "cells" / cid / "cell.json")
    assert cell["status"] == "passed"
    steps = cell["steps"]
    assert steps["nodes"]["status"] == "ok" and steps["nodes"]["detail"]["ranks"] == [1]
    # the first measured request came after node 2's part was up and checked
    node = load(run / "cells" / cid / "nodes" / "host2" / "cell.json")["steps"]
    assert node["verify_env"]["status"] == "ok"
    assert steps["bench"]["start"] >= node["bench"]["start"]  # the hold began first
