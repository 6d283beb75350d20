"""Issue 35: multi-node cells whose head serves HTTP on 127.0.0.1 (SGLang's default `--host`),
over four sshd hosts in network namespaces: two cells of two nodes (host1+host2, host3+host4),
each pair joined by a cable of its own. A node knows its head is ready from the controller, never
by asking the head's HTTP port over the network (which a loopback server never answers)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_helpers import MULTINODE_SERVER, link, processes, unlink
from sim_helpers import free_port, load, only_run, orch
from sshhosts import SSHTestHosts, sshd_available

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

READY_TIMEOUT = 20  # seconds: the code before issue 35 failed every cell here at this timeout


@pytest.fixture(scope="module")
def four_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHTestHosts]:
    """Four sshd hosts, host1-host2 and host3-host4 cabled together as the nodes of a cluster."""
    if not sshd_available():
        pytest.skip("sshd is not installed (apt-get install openssh-server)")
    with SSHTestHosts(4, tmp_path_factory.mktemp("sshhosts4")) as hosts:
        cables = [link(hosts.host("host1"), hosts.host("host2")),
                  link(hosts.host("host3"), hosts.host("host4"))]  # fmt: skip
        try:
            yield hosts
        finally:
            for cable in cables:
                unlink(cable)
            for host in hosts.hosts:  # loopback mode: the runners' state in the shared $HOME
                shutil.rmtree(host.home / ".orch-mn-lo", ignore_errors=True)


def _inventory(hosts: SSHTestHosts, tmp_path: Path) -> Path:
    """Each pair its own ports (hosts share one network in loopback mode)."""
    host_vars: dict[str, dict[str, Any]] = {}
    for first, second in (("host1", "host2"), ("host3", "host4")):
        ports = {"srv_port": free_port(), "dist": free_port()}
        for name in (first, second):
            host_vars[name] = dict(ports)
            if not hosts.isolated:  # hosts share one $HOME: keep their runner state apart
                host_vars[name]["orch_workdir"] = f".orch-mn-lo/{name}"
    return hosts.write_inventory(tmp_path / "hosts.yml", extra_host_vars=host_vars)


def _playbook(path: Path, mode: str, ready: dict[str, Any] | None = None) -> Path:
    data: dict[str, Any] = {
        "name": "loopback-head",
        "hosts": "host1,host2,host3,host4",
        "env": {"MN_TEST": path.parent.name},
        "server": {
            "command": ["{{ orch_python }}", "-c", MULTINODE_SERVER, "{{ node_rank }}",
                        "{{ nnodes }}", "{{ head_host }}", "{{ dist }}", "{{ srv_port }}",
                        "127.0.0.1", mode],
            "nodes": 2,
            "port": "{{ srv_port }}",
            "dist_port": free_port(),  # preflight's; each pair joins at its own `dist`
            "host": "127.0.0.1",
            "ready": {"path": "/", "timeout": READY_TIMEOUT, "interval": 0.05, **(ready or {})},
            "stop_grace": 2,
        },
        "bench": {"command": ["{{ orch_python }}", "-c", "print('x 1.0')"],
                  "metrics": {"x": r"x ([0-9.]+)"}},
        "snapshot": {"pip_freeze": False, "topo": False},
        "telemetry": False,
        "timeouts": {"cell": 120},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _apply(tmp_path: Path, inventory: Path, playbook: Path) -> Any:
    return orch(
        "apply", str(playbook), "-i", str(inventory), "--results", str(tmp_path / "results"),
        cwd=tmp_path, timeout=300,
    )  # fmt: skip


def _settled(tag: str) -> dict[int, bytes]:
    """This test's processes still alive a moment after the run (none, when all is well)."""
    deadline = time.monotonic() + 5
    while processes(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    return processes(tag)


@pytest.mark.parametrize("mode", ["join-first", "serve-first"])
def test_a_head_serving_on_loopback_passes_with_every_node_checked_first(
    four_hosts: SSHTestHosts, tmp_path: Path, mode: str
) -> None:
    inventory = _inventory(four_hosts, tmp_path)
    started = time.monotonic()
    proc = _apply(tmp_path, inventory, _playbook(tmp_path / "pb.yml", mode))
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert seconds < READY_TIMEOUT + 15, seconds  # never a wait for the ready timeout
    run = only_run(tmp_path / "results")
    cells = load(run / "run.json")["cells"]
    assert sorted(c["host"] for c in cells.values()) == ["host1", "host3"], cells
    for cid, entry in cells.items():
        assert entry["status"] == "passed", entry
        folder = run / "cells" / cid
        node_host = {"host1": "host2", "host3": "host4"}[entry["host"]]
        (node,) = load(folder / "nodes.json")
        assert (node["host"], node["rank"], node["status"]) == (node_host, 1, "passed"), node
        head = load(folder / "cell.json")["steps"]
        part = load(folder / "nodes" / node_host / "cell.json")["steps"]
        # the node's part was env-checked before the head's first measured request
        assert part["verify_env"]["status"] == "ok", part
        assert load(folder / "nodes" / node_host / "env_check.json")["ok"] is True
        assert head["bench"]["start"] >= part["bench"]["start"], (head, part)
        # it knew the head was ready from the controller: no URL asked across the network
        assert part["ready"]["detail"]["head"] == entry["host"], part["ready"]
        assert part["ready"]["detail"].get("url") is None, part["ready"]
    assert _settled(tmp_path.name) == {}


def test_asking_the_heads_url_from_the_nodes_names_the_loopback_at_once(
    four_hosts: SSHTestHosts, tmp_path: Path
) -> None:
    """`ready.from_nodes: true` asks the head's readiness URL from every node too: a head on
    127.0.0.1 fails within seconds of being ready, with a reason that says why."""
    if not four_hosts.isolated:
        pytest.skip("the hosts share one network: the head's loopback is every node's")
    inventory = _inventory(four_hosts, tmp_path)
    playbook = _playbook(tmp_path / "pb.yml", "join-first", {"from_nodes": True, "timeout": 60})
    proc = _apply(tmp_path, inventory, playbook)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = only_run(tmp_path / "results")
    for cid, entry in load(run / "run.json")["cells"].items():
        node_host = {"host1": "host2", "host3": "host4"}[entry["host"]]
        assert entry["status"] == "failed", entry
        said = f"the head's readiness URL is not reachable from {node_host} (bound to loopback?)"
        assert said in entry["reason"], entry
        folder = run / "cells" / cid
        head = load(folder / "cell.json")["steps"]
        part = load(folder / "nodes" / node_host / "cell.json")["steps"]
        assert part["ready"]["status"] == "failed", part
        assert part["ready"]["end"] - head["ready"]["end"] < 15, (head["ready"], part["ready"])
    assert _settled(tmp_path.name) == {}
