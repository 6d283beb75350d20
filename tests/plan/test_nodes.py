"""Multi-node cells as planned (plan/nodes.py): host groups, node variables, adapters' flags."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cell import Cell
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.errors import InputError
from orchestrator.execute.apply.node_join import joined_verdict, part_cell
from orchestrator.plan.build import build_cells
from orchestrator.plan.lint import shared_address_warnings
from orchestrator.runner.slurm_tasks import HEAD_PLACEHOLDER

INVENTORY = """
all:
  hosts:
    gpu1: {ansible_host: 10.0.0.1, nic: eth0}
    gpu2: {ansible_host: 10.0.0.2, nic: eth1}
    gpu3: {ansible_host: 10.0.0.3, nic: eth2}
    gpu4: {ansible_host: 10.0.0.4, nic: eth3}
"""

SGLANG = """
name: two-node
hosts: all
matrix:
  steps: [1, 2]
env:
  NCCL_SOCKET_IFNAME: "{{ nic }}"
  RANK_SEEN: "{{ node_rank }}/{{ nnodes }} head={{ head_host }}:{{ head_port }}"
  NODES: "{{ node_hosts | join(',') }}"
server:
  adapter: sglang
  nodes: 2
  args:
    model-path: /models/Kimi-K2.5
    tp-size: 16
    port: 30000
    speculative-num-steps: "{{ matrix.steps }}"
bench:
  adapter: sglang.bench_serving
"""


def plan(
    tmp_path: Path, playbook: str, limit: str | None = None, inventory: str = INVENTORY
) -> list[Cell]:
    (tmp_path / "playbook.yml").write_text(textwrap.dedent(playbook))
    inv = tmp_path / "inventory.yml"
    inv.write_text(textwrap.dedent(inventory))
    return build_cells(
        load_playbook(tmp_path / "playbook.yml", {}), load_inventory(inv), limit=limit
    )


def flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_consecutive_hosts_form_each_server_head_first(tmp_path: Path) -> None:
    cells = plan(tmp_path, SGLANG)
    assert [c.hosts for c in cells] == [("gpu1", "gpu2")] * 2 + [("gpu3", "gpu4")] * 2
    head = cells[0]
    assert head.server is not None and head.server.restart == "per_cell"
    assert flag(head.server.argv, "--node-rank") == "0"
    assert flag(head.server.argv, "--nnodes") == "2"
    assert flag(head.server.argv, "--dist-init-addr") == "10.0.0.1:30100"
    assert flag(head.server.argv, "--host") == "0.0.0.0"
    assert head.server.ready.url == "http://127.0.0.1:30000/health_generate"
    (node,) = head.nodes
    assert (node.host, node.address, node.rank) == ("gpu2", "10.0.0.2", 1)
    assert node.head_port == 30100  # the head's runner checks it is free at preflight
    assert node.server is not None
    assert flag(node.server.argv, "--node-rank") == "1"
    assert flag(node.server.argv, "--dist-init-addr") == "10.0.0.1:30100"
    # every node renders with its own host vars and its node variables
    assert head.env["NCCL_SOCKET_IFNAME"] == "eth0" and node.env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert head.env["RANK_SEEN"] == "0/2 head=10.0.0.1:30100"
    assert node.env["RANK_SEEN"] == "1/2 head=10.0.0.1:30100"
    assert head.env["NODES"] == node.env["NODES"] == "gpu1,gpu2"
    assert cells[2].env["RANK_SEEN"] == "0/2 head=10.0.0.3:30100"


def test_a_cell_id_covers_every_node(tmp_path: Path) -> None:
    ids = [c.id for c in plan(tmp_path, SGLANG)]
    assert len(set(ids)) == 4
    assert ids == [c.id for c in plan(tmp_path, SGLANG)]  # stable
    changed = SGLANG.replace('"{{ nic }}"', "\"{{ nic if node_rank == 0 else 'ib0' }}\"")
    assert plan(tmp_path, changed)[0].id != ids[0]  # only node 1's env differs


def test_one_node_keeps_the_ids_of_a_playbook_without_nodes(tmp_path: Path) -> None:
    single = SGLANG.replace("  nodes: 2\n", "").replace("RANK_SEEN", "R").replace("NODES", "N")
    one = SGLANG.replace("  nodes: 2\n", "  nodes: 1\n").replace("RANK_SEEN", "R")
    one = one.replace("NODES", "N")
    assert [c.id for c in plan(tmp_path, single)] == [c.id for c in plan(tmp_path, one)]
    cells = plan(tmp_path, single)
    assert all(c.nodes == () and c.hosts == (c.host,) for c in cells)
    assert "nodes" not in cells[0].model_dump(mode="json")
    assert cells[0].env["R"] == "0/1 head=10.0.0.1:30100"


def test_a_host_count_that_is_not_a_multiple_is_refused_with_the_hosts(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        plan(tmp_path, SGLANG, limit="gpu1,gpu2,gpu3")
    assert err.value.exit_code == 2
    assert err.value.key_path == "server.nodes"
    assert "3 hosts (gpu1, gpu2, gpu3)" in err.value.message
    line = textwrap.dedent(SGLANG).splitlines().index("  nodes: 2") + 1
    assert err.value.location is not None and err.value.location.line == line


@pytest.mark.parametrize("value", ['"{{ 2 }}"', "0", "two"])
def test_nodes_must_be_a_plain_count(tmp_path: Path, value: str) -> None:
    with pytest.raises(InputError) as err:
        plan(tmp_path, SGLANG.replace("nodes: 2", f"nodes: {value}"))
    assert err.value.key_path.startswith("server.nodes"), err.value.render()


def test_dist_port_is_a_plain_port(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        plan(tmp_path, SGLANG.replace("  nodes: 2\n", '  nodes: 2\n  dist_port: "{{ 5 }}"\n'))
    assert err.value.key_path == "server.dist_port"
    cells = plan(tmp_path, SGLANG.replace("  nodes: 2\n", "  nodes: 2\n  dist_port: 41000\n"))
    assert cells[0].env["RANK_SEEN"] == "0/2 head=10.0.0.1:41000"
    assert cells[0].nodes[0].head_port == 41000


def test_node_variables_are_reserved(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        plan(tmp_path, SGLANG.replace("matrix:", "vars:\n  node_rank: 3\nmatrix:", 1))
    assert "node_rank" in err.value.render()


def test_vllm_spans_nodes_in_its_data_parallel_form(tmp_path: Path) -> None:
    playbook = """
    name: dp
    hosts: all
    server:
      adapter: vllm
      nodes: 2
      dist_port: 13345
      args: {model: /models/m, data-parallel-size-local: 4}
    bench:
      adapter: vllm.bench_serve
    """
    cells = plan(tmp_path, playbook, limit="gpu1,gpu2")
    head = cells[0]
    assert head.server is not None
    argv = head.server.argv
    assert flag(argv, "--data-parallel-size") == "8"
    assert flag(argv, "--data-parallel-address") == "10.0.0.1"
    assert flag(argv, "--data-parallel-rpc-port") == "13345"
    assert "--headless" not in argv
    node_server = head.nodes[0].server
    assert node_server is not None
    assert "--headless" in node_server.argv
    assert flag(node_server.argv, "--data-parallel-start-rank") == "4"


def test_a_part_is_what_its_node_runs(tmp_path: Path) -> None:
    head = plan(tmp_path, SGLANG)[0]
    part = part_cell(head, head.nodes[0])
    assert part.id == head.id + ".n1" and part.host == "gpu2"
    assert part.node is not None and part.node.of == head.id and part.node.head == "gpu1"
    # the controller tells it the head is ready: no URL it might not reach (issue 35)
    assert part.node.head_url is None
    assert part.env == dict(head.nodes[0].env) and part.nodes == ()


def with_ready(playbook: str, ready: str) -> str:
    """SGLANG with `server.ready: <ready>` (the server section ends where bench begins)."""
    return playbook.replace("\nbench:\n", f"\n  ready: {ready}\nbench:\n", 1)


def test_ready_from_nodes_gives_each_part_the_heads_url_as_it_reaches_the_head(
    tmp_path: Path,
) -> None:
    head = plan(tmp_path, with_ready(SGLANG, "{from_nodes: true}"))[0]
    assert head.server is not None and head.server.ready.from_nodes is True
    part = part_cell(head, head.nodes[0])
    assert part.node is not None
    assert part.node.head_url == "http://10.0.0.1:30000/health_generate"
    # off (the default), the cell id is what it was before the key existed
    plain = plan(tmp_path, SGLANG)[0]
    assert plain.server is not None
    assert "from_nodes" not in plain.server.ready.model_dump()
    assert "from_nodes" in head.server.ready.model_dump()


@pytest.mark.parametrize(
    ("ready", "said"),
    [
        ("{from_nodes: yes please}", "expected true or false"),
        ("{from_nodes: true, url: null}", "there is none"),
    ],
)
def test_ready_from_nodes_is_checked(tmp_path: Path, ready: str, said: str) -> None:
    text = with_ready(SGLANG, ready)
    with pytest.raises(InputError) as err:
        plan(tmp_path, text)
    assert said in err.value.render(), err.value.render()
    assert "ready.from_nodes" in err.value.render()


def test_ready_from_nodes_on_a_one_host_server_is_refused(tmp_path: Path) -> None:
    text = with_ready(SGLANG.replace("  nodes: 2\n", ""), "{from_nodes: true}")
    with pytest.raises(InputError) as err:
        plan(tmp_path, text)
    assert "for a server over several hosts" in err.value.render(), err.value.render()


def test_a_failed_node_fails_the_cell_and_is_named_first() -> None:
    nodes: list[dict[str, Any]] = [
        {"host": "gpu2", "rank": 1, "status": "failed", "reason": "rc -9", "failed_step": "bench"}
    ]
    status, reason, step = joined_verdict("failed", "server exited during bench", "bench", nodes)
    assert status == "failed" and step == "bench"
    assert reason == "node gpu2 (rank 1): bench: rc -9; head: server exited during bench"
    ok = [{"host": "gpu2", "rank": 1, "status": "passed"}]
    assert joined_verdict("passed", None, None, ok) == ("passed", None, None)


def test_the_heads_reason_is_left_out_only_when_it_is_the_abort_a_node_caused() -> None:
    nodes: list[dict[str, Any]] = [
        {"host": "gpu2", "rank": 1, "status": "failed", "reason": "rc -9", "failed_step": "bench"}
    ]
    abort = "node gpu2 (rank 1) failed: rc -9"
    _, reason, _ = joined_verdict("failed", abort, "bench", nodes, abort)
    assert reason == "node gpu2 (rank 1): bench: rc -9"
    own = "setup failed: exit 1"  # the head's own failure is kept, whatever its words
    _, reason, _ = joined_verdict("failed", own, "setup", nodes, abort)
    assert reason == "node gpu2 (rank 1): bench: rc -9; head: setup failed: exit 1"


SLURM_INVENTORY = """
cluster:
  vars: {orch_executor: slurm, nic: ib0}
  hosts:
    login: {ansible_host: login.example.org}
lab:
  hosts:
    gpu1: {ansible_host: 10.0.0.1, nic: eth0}
    gpu2: {ansible_host: 10.0.0.2, nic: eth1}
"""


NODE_HOSTS_LINE = """  NODES: "{{ node_hosts | join(',') }}"\n"""


def plan_with(
    tmp_path: Path, inventory: str, limit: str | None = None, playbook: str | None = None
) -> list[Cell]:
    """SGLANG (without node_hosts, which a Slurm host does not define) on `inventory`."""
    text = SGLANG.replace(NODE_HOSTS_LINE, "") if playbook is None else playbook
    (tmp_path / "playbook.yml").write_text(textwrap.dedent(text))
    inv = tmp_path / "inventory.yml"
    inv.write_text(textwrap.dedent(inventory))
    return build_cells(
        load_playbook(tmp_path / "playbook.yml", {}), load_inventory(inv), limit=limit
    )


def test_a_slurm_host_is_a_server_of_its_own_jobs_nodes(tmp_path: Path) -> None:
    cells = plan_with(tmp_path, SLURM_INVENTORY)
    on_slurm = [c for c in cells if c.host == "login"]
    assert [c.hosts for c in on_slurm] == [("login", "login")] * 2
    assert sorted({c.hosts for c in cells}) == [("gpu1", "gpu2"), ("login", "login")]
    head = on_slurm[0]
    (node,) = head.nodes
    assert (node.host, node.rank, node.head_address) == ("login", 1, HEAD_PLACEHOLDER)
    # the head is the job's first node, known once it runs: its runner fills the address in
    assert head.env["RANK_SEEN"] == f"0/2 head={HEAD_PLACEHOLDER}:30100"
    assert node.env["RANK_SEEN"] == f"1/2 head={HEAD_PLACEHOLDER}:30100"
    assert node.server is not None and flag(node.server.argv, "--node-rank") == "1"
    assert flag(node.server.argv, "--dist-init-addr") == f"{HEAD_PLACEHOLDER}:30100"
    assert head.server is not None
    ready = head.server.ready.model_copy(update={"from_nodes": True})
    asking = head.model_copy(update={"server": head.server.model_copy(update={"ready": ready})})
    part = part_cell(asking, node)
    assert part.node is not None and part.node.head_url is not None
    assert f"//{HEAD_PLACEHOLDER}:30000/" in part.node.head_url


def test_hosts_besides_the_slurm_ones_still_come_in_whole_groups(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        plan_with(tmp_path, SLURM_INVENTORY, limit="login,gpu1")
    assert "1 host (gpu1) besides its Slurm hosts: not a multiple of 2" in err.value.message


def test_node_hosts_on_a_slurm_host_is_refused_with_why(tmp_path: Path) -> None:
    """Slurm picks the job's nodes when it starts: a template reading node_hosts there gets
    no stand-in (the login host once per node), but an error that says so."""
    assert NODE_HOSTS_LINE in SGLANG
    with pytest.raises(InputError) as err:
        plan_with(tmp_path, SLURM_INVENTORY, playbook=SGLANG)
    assert err.value.message == "undefined variable 'node_hosts'"
    assert err.value.key_path == "env.NODES"
    assert err.value.hint is not None and "Slurm picks the job's nodes" in err.value.hint
    # the same playbook on hosts reached directly has it
    cells = plan_with(tmp_path, SLURM_INVENTORY, limit="lab", playbook=SGLANG)
    assert {c.env["NODES"] for c in cells} == {"gpu1,gpu2"}


def test_nodes_that_only_stopped_with_the_head_leave_the_head_its_reason() -> None:
    """The head failed first (its port taken): the nodes released before they started say so,
    and the cell's reason is the head's, not theirs."""
    from orchestrator.runner.node import HEAD_ENDED

    nodes: list[dict[str, Any]] = [
        {"host": f"gpu{r + 1}", "rank": r, "status": "failed", "failed_step": "server_start",
         "reason": f"{HEAD_ENDED} before this node's part started"}
        for r in (1, 2)
    ]  # fmt: skip
    own = "port 30000 is already in use"
    status, reason, step = joined_verdict("failed", own, "preflight", nodes)
    assert (status, step) == ("failed", "preflight")
    assert reason == f"{own}; nodes gpu2 (rank 1), gpu3 (rank 2) stopped with the head"
    # one node with a failure of its own is named first again
    nodes[1]["reason"] = "rc -9"
    _, reason, _ = joined_verdict("failed", own, "preflight", nodes)
    assert reason is not None and reason.startswith("node gpu2 (rank 1): server_start: ")
    assert "node gpu3 (rank 2): server_start: rc -9" in reason and reason.endswith(f"head: {own}")
    # a head that passed while its nodes did not take part is no pass
    assert joined_verdict("passed", None, None, nodes[:1])[0] == "failed"


def test_two_names_for_one_address_forming_a_server_are_warned_about(tmp_path: Path) -> None:
    """Issue 23 item 24: two inventory aliases of one address were taken as a 2-node server
    without a word."""
    assert shared_address_warnings(plan(tmp_path, SGLANG)) == []
    aliases = INVENTORY.replace("10.0.0.2", "10.0.0.1")
    assert shared_address_warnings(plan(tmp_path, SGLANG, inventory=aliases)) == [
        "warning: hosts gpu1, gpu2 form one server but all are 10.0.0.1: its nodes run on one "
        "machine (two inventory names for one address?)"
    ]
