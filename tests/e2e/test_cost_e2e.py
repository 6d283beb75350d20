"""Cost per million tokens end to end (issue 38 item 5): `orch apply` of two simulator cells on
a localhost inventory that declares `orch_gpu_hour_usd`, then `orch report --format json` of
the bundle alone: each repeat's $/M output tokens is the price × the cell's GPUs over its output
throughput, and each row says whether its cell is on the per-GPU vs per-user front."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from bundle_helpers import apply, cell_dirs, ok, orch, read_json, write_yaml
from bundle_helpers import sim_playbook as make_playbook
from sim_helpers import free_port

pytestmark = [pytest.mark.slow]

PRICE = 2.5  # USD per GPU-hour
TP = 2


def test_a_declared_price_gives_dollars_per_million_tokens(tmp_path: Path) -> None:
    playbook = make_playbook(
        tmp_path / "pb.yml",
        name="e2e-cost",
        port=free_port(),
        repo=None,
        repeats=1,
        tp_size=TP,
        matrix={"conc": [1, 2]},
    )
    data = yaml.safe_load(playbook.read_text())
    data["bench"]["args"]["max-concurrency"] = "{{ matrix.conc }}"
    data["bench"]["args"]["num-prompts"] = 4
    write_yaml(playbook, data)
    inventory = tmp_path / "inv.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      orch_gpu_hour_usd: {PRICE}\n"
    )
    home = tmp_path / "home"
    run = apply(playbook, tmp_path / "results", "-i", str(inventory), home=home)

    for cell in cell_dirs(run):
        cost = read_json(cell / "metrics.json")["cost"]
        assert cost["usd_per_gpu_hour"] == PRICE and cost["gpus"] == TP, cost

    # the report reads the bundle alone: the inventory is gone
    inventory.unlink()
    rows = json.loads(ok(orch("report", str(run), "--format", "json", home=home)))
    by_metric: dict[tuple[str, str], float] = {
        (r["cell_id"], r["metric"]): r["value"] for r in rows if r["repeat"] == 1
    }
    cells = {r["cell_id"] for r in rows}
    assert len(cells) == 2
    for cid in cells:
        tput = by_metric[(cid, "output_throughput")]
        dollars = by_metric[(cid, "usd_per_million_output_tokens")]
        assert dollars == pytest.approx(PRICE * TP * 1e6 / (tput * 3600)), (cid, dollars)
        assert by_metric[(cid, "output_throughput_per_gpu")] == pytest.approx(tput / TP)
        tpot = by_metric[(cid, "median_tpot_ms")]
        assert by_metric[(cid, "interactivity")] == pytest.approx(1000 / tpot)
    unit = {r["metric"]: r["unit"] for r in rows}
    assert unit["usd_per_million_output_tokens"] == "$/Mtok"
    assert unit["interactivity"] == "tok/s/user"
    assert {type(r["pareto_front"]) for r in rows} == {bool}  # every cell has both figures
    assert any(r["pareto_front"] for r in rows)

    table = ok(orch("report", str(run), home=home))
    assert "usd_per_million_output_tokens" in table, table
    assert f"${PRICE:g}/GPU-hour x {TP} GPUs: tp {TP} (server args)" in table, table
    assert "vs interactivity" in table, table
