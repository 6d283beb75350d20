"""The sglang.bench_serving adapter on what the simulator writes: `orch sim bench`'s JSONL line
and `/server_info` captures with the sim's cumulative counters (spec_verify_ct and
spec_num_accepted_tokens), which give a per-run accept length (source server_info_delta)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.adapters.base import RepeatResult
from orchestrator.cell import Cell
from orchestrator.sim import bench as sim_bench

from .cells import make_cell


def sim_cell(warmup: int) -> Cell:
    server = server_adapter("sglang").build(
        {"launcher": ["python3", "-m", "orchestrator.sim", "serve"], "args": {"port": 30555}}
    )
    bench = bench_adapter("sglang.bench_serving").build(
        {"launcher": ["python3", "-m", "orchestrator.sim", "bench"], "warmup": warmup,
         "args": {"dataset-name": "random-ids", "num-prompts": 2}},
        server,
    )  # fmt: skip
    return make_cell(bench=bench, server=server)


def sim_record(accept_length: float | None) -> dict[str, Any]:
    """A line exactly as `orch sim bench` writes it (request_rate inf -> `Infinity`)."""
    args = sim_bench.build_parser().parse_args(
        ["--random-input-len", "256", "--random-output-len", "4", "--num-prompts", "2"]
    )
    results = [
        sim_bench.Result(True, 256, 4, 4, ttft=0.010, latency=0.040, itl=[0.01, 0.01, 0.01]),
        sim_bench.Result(True, 256, 4, 4, ttft=0.012, latency=0.042, itl=[0.01, 0.01, 0.01]),
    ]
    return sim_bench.compute_record(args, results, 0.1, 0.05, accept_length)


def sim_info(steps: int, tokens: int) -> dict[str, Any]:
    """`/server_info` of `orch sim serve` (speculating) after `steps` decode steps."""
    return {
        "tp_size": 4,
        "speculative_algorithm": "EAGLE3",
        "internal_states": [
            {
                "last_gen_throughput": 47.1,
                "memory_usage": {"weight": 84.24, "kvcache": 35.1},
                "avg_spec_accept_length": tokens / steps,
                "spec_verify_ct": steps,
                "spec_num_accepted_tokens": tokens,
            }
        ],
    }


def write(cell_dir: Path, repeat: str, record: dict[str, Any], infos: dict[str, Any]) -> Path:
    run_dir = cell_dir / "bench" / repeat
    run_dir.mkdir(parents=True)
    (run_dir / "result.jsonl").write_text(json.dumps(record) + "\n")
    (cell_dir / "captures").mkdir(exist_ok=True)
    for moment, info in infos.items():
        (cell_dir / "captures" / f"server_info.{moment}.json").write_text(json.dumps(info))
    return run_dir


def parse(run_dir: Path, cell: Cell) -> RepeatResult:
    return bench_adapter("sglang.bench_serving").parse_repeat_with_sources(run_dir, cell)


def test_sim_bench_line_and_sim_counters_give_the_run_s_accept_length(tmp_path: Path) -> None:
    record = sim_record(accept_length=2.2)  # the cumulative average the bench read at its end
    assert "Infinity" in json.dumps(record)
    infos = {
        "ready": sim_info(3, 7),  # the server's own warm-up request already speculated
        "after-1": sim_info(203, 407),
        "after-2": sim_info(403, 787),
    }
    cell = sim_cell(warmup=0)
    first = parse(write(tmp_path, "1", record, infos), cell)
    assert first.metrics["accept_length"] == pytest.approx(400 / 200)
    assert first.sources["accept_length"] == "server_info_delta"
    second = parse(write(tmp_path, "2", record, {}), cell)
    assert second.metrics["accept_length"] == pytest.approx(380 / 200)
    assert second.sources["accept_length"] == "server_info_delta"
    m = second.metrics
    assert m["output_throughput"] == pytest.approx(8 / (0.1 / 0.05))
    assert m["completed"] == 2 and m["p95_itl_ms"] == pytest.approx(200.0)
    assert {second.sources[k] for k in m if k != "accept_length"} == {"result.jsonl"}
    assert "request_rate" not in m


def test_sim_bench_line_without_speculation(tmp_path: Path) -> None:
    info = {"internal_states": [{"last_gen_throughput": 44.0}]}
    run_dir = write(tmp_path, "1", sim_record(None), {"ready": info, "after-1": info})
    result = parse(run_dir, sim_cell(warmup=0))
    assert "accept_length" not in result.metrics  # null in the line, nothing on the server
    assert result.metrics["output_throughput"] > 0
