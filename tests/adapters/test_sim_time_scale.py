"""A real SGLang client against `orch sim serve` at time scale S times the server in real
seconds: the sglang bench adapters put its numbers in simulated units, and leave `orch sim
bench` (which divides by S itself and says so) and real servers alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.plan.cell import Cell
from orchestrator.sim import bench as sim_bench

from .cells import make_cell
from .test_sim_outputs import parse, sim_cell, sim_record, write

SCALE = 0.05


def scaled_info(scale: float | None) -> dict[str, Any]:
    info: dict[str, Any] = {"tp_size": 1, "internal_states": [{"last_gen_throughput": 40.0}]}
    if scale is not None:
        info["sim"] = {"time_scale": scale}
    return info


def record() -> dict[str, Any]:
    # As a real client would write it: its duration is real time (scale 1 = no division).
    return sim_record(accept_length=None) | {"output_throughput": 80.0, "mean_ttft_ms": 11.0}


def test_a_real_client_s_timings_are_converted_to_simulated_units(tmp_path: Path) -> None:
    infos = {"ready": scaled_info(SCALE), "after-1": scaled_info(SCALE)}
    run_dir = write(tmp_path, "1", record(), infos)
    (run_dir / "stdout").write_text("Serving Benchmark Result\n")
    result = parse(run_dir, sim_cell(warmup=0))
    assert result.metrics["output_throughput"] == pytest.approx(80.0 * SCALE)
    assert result.metrics["mean_ttft_ms"] == pytest.approx(11.0 / SCALE)
    assert result.metrics["completed"] == 2  # a count, not a timing
    assert result.sources["mean_ttft_ms"] == "result.jsonl ÷ time scale 0.05"
    assert any("converted to simulated units" in note for note in result.notes)


def test_orch_sim_bench_already_reports_simulated_units(tmp_path: Path) -> None:
    infos = {"ready": scaled_info(SCALE), "after-1": scaled_info(SCALE)}
    run_dir = write(tmp_path, "1", record(), infos)
    marker = sim_bench.SIMULATED_UNITS_LINE.format(scale=SCALE)
    (run_dir / "stdout").write_text(f"Namespace(...)\n{marker}\n")
    result = parse(run_dir, sim_cell(warmup=0))
    assert result.metrics["output_throughput"] == pytest.approx(80.0)
    assert result.metrics["mean_ttft_ms"] == pytest.approx(11.0)


def test_a_real_server_is_left_alone(tmp_path: Path) -> None:
    infos = {"ready": scaled_info(None), "after-1": scaled_info(None)}
    run_dir = write(tmp_path, "1", record(), infos)
    (run_dir / "stdout").write_text("Serving Benchmark Result\n")
    result = parse(run_dir, sim_cell(warmup=0))
    assert result.metrics["output_throughput"] == pytest.approx(80.0)
    assert not any("time scale" in note for note in result.notes)


def test_the_server_log_tells_the_scale_when_nothing_was_captured(tmp_path: Path) -> None:
    run_dir = write(tmp_path, "1", record(), {})
    (run_dir / "stdout").write_text("Serving Benchmark Result\n")
    (tmp_path / "server.log").write_text(
        "[2026-12-01 14:00:00] WARNING: sim: time scale 0.02: every simulated second takes\n"
    )
    result = parse(run_dir, sim_cell(warmup=0))
    assert result.metrics["output_throughput"] == pytest.approx(80.0 * 0.02)
    facts = server_adapter("sglang").analyze(tmp_path, sim_cell(warmup=0))["facts"]
    assert facts["sim_time_scale"] == 0.02


def one_batch_cell() -> Cell:
    server = server_adapter("sglang").build({"args": {"port": 30555, "model-path": "/m"}})
    bench = bench_adapter("sglang.bench_one_batch_server").build({}, server)
    return make_cell(bench=bench, server=server, env={"ORCH_SIM_TIME_SCALE": "0.1"})


def test_bench_one_batch_server_is_converted_but_not_the_server_s_own_figure(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "bench" / "1"
    run_dir.mkdir(parents=True)
    row = {"batch_size": 1, "input_len": 8, "output_len": 8, "latency": 0.2}
    row |= {"output_throughput": 400.0, "last_gen_throughput": 40.0, "last_ttft": 0.01}
    (run_dir / "result.jsonl").write_text(json.dumps(row) + "\n")
    cell = one_batch_cell()
    result = bench_adapter("sglang.bench_one_batch_server").parse_repeat_with_sources(run_dir, cell)
    assert result.metrics["latency"] == pytest.approx(2.0)
    assert result.metrics["output_throughput"] == pytest.approx(40.0)
    assert result.metrics["last_ttft"] == pytest.approx(0.1)
    assert result.metrics["last_gen_throughput"] == pytest.approx(40.0)
