"""Cost and per-GPU figures (issue 38 item 5): the GPUs a cell uses, the metrics derived from a
repeat's own (per GPU, per user, $ per million output tokens), the `cost` block a bundle keeps,
and the per-GPU vs per-user Pareto front of a report."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from analyze_fixtures import base_cell, write_run

from orchestrator.analyze.cost import (
    add_cost_metrics,
    cell_gpus,
    cell_price,
    cost_notes,
    derived_metrics,
)
from orchestrator.analyze.pareto import (
    FRONT_MARK,
    front_rows,
    gpu_user_front,
    render_gpu_user,
)
from orchestrator.analyze.report.tables import footer_lines, load_report, tidy_rows
from orchestrator.cell import Cell


def cell(args: dict[str, Any], *, adapter: str = "sglang", **env: str) -> Cell:
    data = base_cell(args=args, env=dict(env))
    data["server"]["adapter"] = adapter
    return Cell.model_validate(data)


@pytest.mark.parametrize(
    ("adapter", "args", "env", "telemetry", "gpus", "how"),
    [
        ("sglang", {"tp-size": 8}, {}, 0, 8, "tp 8 (server args)"),
        ("vllm", {"tensor_parallel_size": 4, "pipeline-parallel-size": 2}, {}, 0, 8, "tp 4 x pp 2"),
        ("sglang", {"tp": 4, "dp-size": 2}, {}, 0, 8, "tp 4 x dp 2"),
        # dp attention splits tp's GPUs among its dp ranks: it adds none
        ("sglang", {"tp": 4, "dp": 4, "enable-dp-attention": True}, {}, 0, 4, "tp 4 ("),
        ("vllm", {"model": "m"}, {}, 8, 1, "tp 1 (vllm's default"),
        ("generic", {}, {"CUDA_VISIBLE_DEVICES": "0,1,2"}, 8, 3, "CUDA_VISIBLE_DEVICES"),
        ("generic", {}, {}, 2, 2, "the GPUs telemetry sampled"),
        ("generic", {}, {}, 0, None, "unknown"),
    ],
)
def test_the_gpus_a_cell_uses(
    adapter: str,
    args: dict[str, Any],
    env: dict[str, str],
    telemetry: int,
    gpus: int | None,
    how: str,
) -> None:
    counted = cell_gpus(cell(args, adapter=adapter, **env), telemetry)
    assert counted.n == gpus
    assert counted.how.startswith(how), counted.how


def test_derived_metrics_follow_inferencex() -> None:
    repeat = {"output_throughput": 720.0, "total_throughput": 1440.0, "median_tpot_ms": 20.0}
    got = derived_metrics(repeat, gpus=2, usd_per_gpu_hour=3.0)
    assert got["output_throughput_per_gpu"] == 360.0
    assert got["total_throughput_per_gpu"] == 720.0
    assert got["interactivity"] == 50.0  # 1000 / TPOT ms: tok/s per user
    # 2 GPUs x $3/h = $6/h for 720 tok/s x 3600 s = 2.592M tokens: $2.3148 per million
    assert got["usd_per_million_output_tokens"] == pytest.approx(6.0 / 2.592)
    assert (
        derived_metrics(repeat, gpus=2, usd_per_gpu_hour=0.0)["usd_per_million_output_tokens"]
        == 0.0
    )


def test_no_price_no_gpus_or_no_throughput_give_no_figure_never_zero() -> None:
    repeat = {"output_throughput": 720.0, "median_tpot_ms": 20.0}
    assert "usd_per_million_output_tokens" not in derived_metrics(repeat, 2, None)
    unknown = derived_metrics(repeat, None, 3.0)
    assert set(unknown) == {"interactivity"}  # per user needs no GPU count
    assert derived_metrics({"output_throughput": 0.0, "median_tpot_ms": 0}, 2, 3.0) == {}


def test_the_cost_block_says_why_a_cell_has_no_price() -> None:
    c = cell({"tp-size": 2})
    repeats: list[dict[str, Any]] = [{"n": 1, "output_throughput": 100.0}]
    sources: dict[str, Any] = {}
    block = add_cost_metrics(repeats, sources, c, {"gpu01": None})
    assert block["usd_per_gpu_hour"] is None and block["gpus"] == 2
    assert block["no_price"] == "host 'gpu01' declares no orch_gpu_hour_usd"
    assert repeats[0]["output_throughput_per_gpu"] == 50.0
    assert "usd_per_million_output_tokens" not in repeats[0]
    priced = add_cost_metrics([{"output_throughput": 100.0}], {}, c, {"gpu01": 1.8})
    assert priced["usd_per_gpu_hour"] == 1.8 and "no_price" not in priced
    assert "measured duration" in priced["priced"]


def test_a_multi_node_cell_is_priced_at_its_hosts_mean_and_needs_every_price() -> None:
    data = base_cell(args={"tp-size": 16})
    data["nodes"] = [{"host": "gpu02", "address": "10.0.0.2", "rank": 1, "head_address": "h"}]
    two = Cell.model_validate(data)
    assert cell_price(two, {"gpu01": 2.0, "gpu02": 4.0}) == (3.0, None)
    assert cell_price(two, {"gpu01": 2.0}) == (None, "host 'gpu02' declares no orch_gpu_hour_usd")


# (cell, tp): output tok/s, TPOT ms; priced except `c16-tp1`
SWEEP = {
    ("c1-tp1", 1): (100.0, 10.0),  # 100 tok/s/GPU, 100 tok/s/user: front (most per user)
    ("c8-tp1", 1): (400.0, 20.0),  # 400, 50: front
    ("c8-tp2", 2): (600.0, 25.0),  # 300, 40: dominated by c8-tp1
    ("c16-tp1", 1): (500.0, 40.0),  # 500, 25: front (most per GPU)
}


def sweep_run(tmp_path: Path) -> Path:
    cells, blocks = [], {}
    for (name, tp), (tput, tpot) in SWEEP.items():
        c = base_cell(f"{name}-0000", axes={"cell": name}, args={"tp-size": tp})
        repeat = {"output_throughput": tput, "median_tpot_ms": tpot}
        price = None if name == "c16-tp1" else 2.0
        block = add_cost_metrics([repeat], {}, Cell.model_validate(c), {"gpu01": price})
        cells.append({"cell": c, "repeats": [repeat, repeat]})
        blocks[c["id"]] = block
    run = write_run(tmp_path, "20261206-060000-cost-0001", cells)
    for cid, block in blocks.items():  # the cost block, as score_cell records it
        path = run / "cells" / cid / "metrics.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "cost": block}))
    return run


def test_the_report_marks_the_per_gpu_per_user_front(tmp_path: Path) -> None:
    rep = load_report(sweep_run(tmp_path))
    view = gpu_user_front(rep)
    assert view is not None and view.per_gpu == "output_throughput_per_gpu"
    on = {p.cell_id.split("-0000")[0] for p in view.points if p.on_front}
    assert on == {"c1-tp1", "c8-tp1", "c16-tp1"}
    assert [p.per_user for p in view.front] == [25.0, 50.0, 100.0]
    text = render_gpu_user(view, rep, "md")
    assert "tok/s/GPU" in text and "tok/s/user" in text
    assert sum(line.startswith("|") and FRONT_MARK in line for line in text.splitlines()) == 3
    rows = front_rows(tidy_rows(rep), view)
    marks = {r["cell_id"]: r["pareto_front"] for r in rows}
    assert marks["c8-tp2-0000"] is False and marks["c8-tp1-0000"] is True


def test_the_report_says_which_cell_has_no_price(tmp_path: Path) -> None:
    rep = load_report(sweep_run(tmp_path))
    rep.metrics = ["output_throughput", "usd_per_million_output_tokens"]
    footer = footer_lines(rep)
    assert (
        "c16-tp1-0000: no usd_per_million_output_tokens: host 'gpu01' declares no "
        "orch_gpu_hour_usd" in footer
    )
    assert "c8-tp2-0000: $2/GPU-hour x 2 GPUs: tp 2 (server args)" in footer
    assert rep.rows[3].metrics.get("usd_per_million_output_tokens") is None
    cells = [(r.cell.id, r.cell.metrics) for r in rep.rows if r.cell.id.startswith("c16")]
    assert cost_notes(cells) == []  # nothing priced: nothing to say


def test_one_cell_has_no_front(tmp_path: Path) -> None:
    c = base_cell("only-0000")
    run = write_run(tmp_path, "r", [{"cell": c, "repeats": [{"output_throughput": 1.0}]}])
    assert gpu_user_front(load_report(run)) is None


def test_the_html_report_has_the_front_table(tmp_path: Path) -> None:
    from orchestrator.analyze.report.html import render_html

    rep = load_report(sweep_run(tmp_path))
    page = render_html(rep, front=gpu_user_front(rep))
    section = page.split('<section id="gpu-user">', 1)[1].split("</section>", 1)[0]
    assert section.count(FRONT_MARK) == 4  # three cells on the front, one in the note


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="needs orch[plot] (matplotlib)"
)
def test_the_plot_draws_the_front_beside_the_report_plot(tmp_path: Path) -> None:
    from orchestrator.analyze.plot.front import plot_gpu_user

    rep = load_report(sweep_run(tmp_path / "run"))
    view = gpu_user_front(rep)
    assert view is not None
    out = plot_gpu_user(view, rep, tmp_path / "report.png")
    assert out == tmp_path / "report-pareto.png"
    assert out.read_bytes().startswith(b"\x89PNG")
