"""The real example playbooks load and plan with the example inventory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.plan.build import build_cells

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["eagle3_matrix.yml", "vllm_eagle3.yml"])
def test_playbook_plans_twelve_cells_per_host(name: str) -> None:
    playbook = load_playbook(ROOT / "playbooks" / name)
    inventory = load_inventory(ROOT / "inventories" / "example.yml")
    cells = build_cells(playbook, inventory, limit="h200-01")
    assert len(cells) == 12
    for cell in cells:
        assert cell.server is not None
        assert cell.env["NCCL_DEBUG"] == "INFO"
        assert "--disable-custom-all-reduce" in cell.server.argv
        assert cell.bench.warmup == 1 and cell.bench.repeats == 5
        assert cell.expect["output_throughput"].min == 85
        tuned = cell.axes["nccl"] == "tuned"
        assert ("NCCL_ALGO" in cell.env) is tuned


def test_sglang_matrix_three_step_eagle() -> None:
    playbook = load_playbook(ROOT / "playbooks" / "eagle3_matrix.yml")
    inventory = load_inventory(ROOT / "inventories" / "example.yml")
    cells = build_cells(playbook, inventory, limit="h200-01")
    three = [c for c in cells if c.axes["spec"] == "eagle3-3"]
    assert len(three) == 4
    argv = list(three[0].server.argv)  # type: ignore[union-attr]
    assert argv[argv.index("--speculative-num-steps") + 1] == "3"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "4"
    assert argv[argv.index("--tp-size") + 1] == "8"
    assert {c.repo.url for c in cells if c.repo} == {"https://github.com/sgl-project/sglang.git"}


def test_vllm_speculative_config_is_one_json_argument() -> None:
    playbook = load_playbook(ROOT / "playbooks" / "vllm_eagle3.yml")
    inventory = load_inventory(ROOT / "inventories" / "example.yml")
    cells = build_cells(playbook, inventory, limit="h200-01")
    cell = next(c for c in cells if c.axes["spec"] == "eagle3-3")
    argv = list(cell.server.argv)  # type: ignore[union-attr]
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {
        "method": "eagle3",
        "model": "/models/Kimi-K2.5-EAGLE3",
        "num_speculative_tokens": 3,
    }


def test_the_two_node_playbook_plans_one_server_over_both_h200s() -> None:
    playbook = load_playbook(ROOT / "playbooks" / "eagle3_2node.yml")
    inventory = load_inventory(ROOT / "inventories" / "example.yml")
    cells = build_cells(playbook, inventory)
    assert len(cells) == 4 and {c.hosts for c in cells} == {("h200-01", "h200-02")}
    for cell in cells:
        assert cell.server is not None and len(cell.nodes) == 1
        argv = list(cell.server.argv)
        assert argv[argv.index("--dist-init-addr") + 1] == "10.20.0.11:50000"
        node = cell.nodes[0]
        assert node.server is not None and node.env["NCCL_IB_HCA"] == cell.env["NCCL_IB_HCA"]
        node_argv = list(node.server.argv)
        assert node_argv[node_argv.index("--node-rank") + 1] == "1"


def test_the_sweep_playbook_sweeps_concurrency() -> None:
    playbook = load_playbook(ROOT / "playbooks" / "demo_sweep.yml", {"sim_repo": "/r"})
    cells = build_cells(playbook, load_inventory(None))
    assert sorted({c.axes["concurrency"] for c in cells}) == [1, 2, 4] and len(cells) == 6
