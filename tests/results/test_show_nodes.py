"""`orch show RUN/CELL` on a multi-node cell names every node, and one nodes.json reader serves
show and diff alike."""

from __future__ import annotations

import json
from pathlib import Path

from results_helpers import make_cell_dir

from orchestrator.results.read import open_cell
from orchestrator.results.records import node_records
from orchestrator.results.show import describe_cell

REASON = "NCCL_IB_HCA expected mlx5_0, observed <unset> in pid 4242\nmore detail"


def _multi_node_cell(root: Path) -> Path:
    """A head cell folder with two other nodes: host2 passed, host3 failed (its folder there),
    host4's results never arrived (no folder)."""
    head = make_cell_dir(root, "c-1-aaaaaaaa", host="host1")
    for host in ("host2", "host3"):
        make_cell_dir(head / "nodes", host, host=host)
    nodes = [
        {"host": "host3", "rank": 2, "part": "c-1-aaaaaaaa.n2", "status": "failed",
         "reason": REASON, "failed_step": "verify_env"},
        {"host": "host2", "rank": 1, "part": "c-1-aaaaaaaa.n1", "status": "passed",
         "reason": None, "failed_step": None, "hold": {"held_seconds": 3.1, "released": "end"}},
        {"host": "host4", "rank": 3, "part": "c-1-aaaaaaaa.n3", "status": "failed",
         "reason": "its result never arrived"},
    ]  # fmt: skip
    (head / "nodes.json").write_text(json.dumps(nodes))
    return head


def test_show_lists_every_other_node_after_the_heads_lines(tmp_path: Path) -> None:
    head = _multi_node_cell(tmp_path)
    text = describe_cell(open_cell(head))
    assert "host      host1 (head, rank 0)" in text
    block = text.split("\nnodes: (4 in all")[1].splitlines()[1:]
    assert text.index("server.log") < text.index("\nnodes: ")  # after the head's own files
    assert [line.split()[:4] for line in block] == [
        ["rank", "1", "host2", "passed"],
        ["rank", "2", "host3", "failed"],
        ["rank", "3", "host4", "failed"],
    ]
    assert block[0].endswith(f"{head / 'nodes' / 'host2'}/")
    first = REASON.splitlines()[0]
    folder = head / "nodes" / "host3"
    assert block[1].endswith(f"{folder}/  at verify_env: {first} (more in its cell.json)")
    assert "more detail" not in text  # one line per node: the reason's first line
    assert f"{head / 'nodes' / 'host4'} (not there)  its result never arrived" in block[2]


def test_a_one_node_cell_shows_no_nodes(tmp_path: Path) -> None:
    text = describe_cell(open_cell(make_cell_dir(tmp_path, "c-2-bbbbbbbb")))
    assert "nodes:" not in text and "(head" not in text


def test_a_hostile_nodes_json_names_no_folder_outside_the_cell(tmp_path: Path) -> None:
    head = _multi_node_cell(tmp_path)
    bad = [
        {"host": "../../etc", "rank": 1, "status": "passed"},
        {"host": ".hidden", "rank": 2, "status": "passed"},
        {"host": "host2", "rank": "1", "status": "passed"},
        {"host": "host2", "rank": 4, "status": "passed"},
    ]
    (head / "nodes.json").write_text(json.dumps(bad))
    assert [(n.host, n.rank) for n in node_records(head)] == [("host2", 4)]
    (head / "nodes.json").write_text("{not json")
    assert node_records(head) == [] and "nodes:" not in describe_cell(open_cell(head))
