"""AIPerf's adapter: its flags built from a playbook's args, and a real profile export (aiperf
0.13.0 against `orch sim serve`, tests/fixtures/aiperf/README.md) read field for field, each
value converted by the unit written beside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.adapters import bench_adapter, metric_unit, server_adapter
from orchestrator.adapters.aiperf import CATALOGUE, export_metrics
from orchestrator.cell import BenchSpec
from orchestrator.errors import InputError

from .cells import FIXTURES, make_cell

EXPORT = FIXTURES / "aiperf" / "aiperf-0.13.0-profile_export_aiperf.json"


def test_argv_aims_at_the_server_and_writes_into_the_repeat_dir() -> None:
    server = server_adapter("vllm").build({"args": {"model": "m", "port": 8001}})
    section = {
        "python": "/venv/bin/python",
        "args": {"model": "m", "endpoint-type": "completions", "streaming": True,
                 "request-count": 6, "concurrency": 2},
    }  # fmt: skip
    spec = bench_adapter("aiperf").build(section, server)
    assert spec.argv == (
        "/venv/bin/python", "-m", "aiperf", "profile",
        "--url", "http://127.0.0.1:8001", "--output-artifact-dir", ".", "--ui-type", "none",
        "--model", "m", "--endpoint-type", "completions", "--streaming",
        "--request-count", "6", "--concurrency", "2",
    )  # fmt: skip
    assert spec.result_file == "profile_export_aiperf.json"
    assert bench_adapter("aiperf").sends(spec) == "6 synthetic requests"
    inputs = bench_adapter("aiperf").run_inputs(spec)
    assert inputs is not None and inputs.seed_flag == "--random-seed"


def test_a_given_folder_and_prefix_name_the_result_and_no_server_is_refused() -> None:
    spec = bench_adapter("aiperf").build(
        {"args": {"url": "http://h:1", "output-artifact-dir": "out", "profile-export-prefix": "x"}},
        None,
    )
    assert spec.result_file == "out/x.json" and "--url" in spec.argv
    assert spec.argv.count("--output-artifact-dir") == 1
    with pytest.raises(InputError, match="server to aim at") as caught:
        bench_adapter("aiperf").build({"args": {}}, None)
    assert caught.value.key_path == "args.url"


def test_a_real_export_is_read_field_for_field(tmp_path: Path) -> None:
    shutil.copy(EXPORT, tmp_path / "profile_export_aiperf.json")
    cell = make_cell(
        bench=BenchSpec(adapter="aiperf", argv=("x",), result_file="profile_export_aiperf.json")
    )
    result = bench_adapter("aiperf").parse_repeat_with_sources(tmp_path, cell)
    raw = json.loads(EXPORT.read_text())
    m = result.metrics
    assert m["completed"] == 6 and m["failed"] == 0 and m["error_rate"] == 0
    assert m["request_throughput"] == raw["request_throughput"]["avg"]
    assert m["output_throughput"] == raw["output_token_throughput"]["avg"]
    assert m["duration"] == raw["benchmark_duration"]["avg"]  # AIPerf writes "sec"
    assert m["total_output_tokens"] == raw["total_osl"]["avg"]
    assert m["p99_ttft_ms"] == raw["time_to_first_token"]["p99"]
    assert m["median_e2e_latency_ms"] == raw["request_latency"]["p50"]
    # AIPerf's per-request inter_token_latency is TPOT; the chunk gaps are ITL
    assert m["mean_tpot_ms"] == raw["inter_token_latency"]["avg"]
    assert m["mean_itl_ms"] == raw["inter_chunk_latency"]["avg"]
    assert set(m) == {info.name for info in CATALOGUE}  # the catalogue lists what 0.13 writes
    assert result.notes == []


def test_units_are_converted_by_what_aiperf_writes_and_unknown_ones_left_out() -> None:
    data = {
        "request_latency": {"unit": "sec", "avg": 1.5, "p50": 1.0},
        "request_error_rate": {"unit": "%", "avg": 25.0},
        "time_to_first_token": {"unit": "furlongs", "avg": 3.0},
        "was_cancelled": True,
    }
    metrics, notes = export_metrics(data)
    assert metrics == {"mean_e2e_latency_ms": 1500.0, "median_e2e_latency_ms": 1000.0,
                       "error_rate": 0.25}  # fmt: skip
    assert notes == [
        "flag: AIPerf says the run was cancelled or is incomplete",
        "time_to_first_token: unit 'furlongs' is not ms: left out",
    ]


def test_units_come_from_the_catalogue() -> None:
    assert metric_unit("p99_tpot_ms", "aiperf") == "ms"
    assert metric_unit("output_throughput_per_user", "aiperf") == "tok/s/user"
