"""sglang.bench_serving and sglang.bench_one_batch_server: argv, both result generations,
and the per-run accept length from /server_info snapshots."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.adapters.base import RepeatResult
from orchestrator.cell import BenchSpec, Cell
from orchestrator.errors import InputError

from .cells import FIXTURES, make_cell

SG = FIXTURES / "sglang"
BENCH_ARGS = {
    "dataset-name": "random",
    "random-input-len": 1024,
    "random-output-len": 512,
    "random-range-ratio": 1,
    "num-prompts": 32,
    "max-concurrency": 1,
}


def sglang_server(**args: Any) -> Any:
    return server_adapter("sglang").build({"args": {"model-path": "/m", **args}})


def test_bench_serving_argv() -> None:
    spec = bench_adapter("sglang.bench_serving").build(
        {"args": BENCH_ARGS, "warmup": 1, "repeats": 5}, sglang_server(host="0.0.0.0", port=30001)
    )
    assert spec.argv == (
        "python3", "-m", "sglang.bench_serving",
        "--backend", "sglang", "--base-url", "http://127.0.0.1:30001",
        "--dataset-name", "random", "--random-input-len", "1024", "--random-output-len", "512",
        "--random-range-ratio", "1", "--num-prompts", "32", "--max-concurrency", "1",
        "--output-file", "result.jsonl",
    )  # fmt: skip
    assert (spec.result_file, spec.warmup, spec.repeats) == ("result.jsonl", 1, 5)


def test_bench_serving_launcher_and_user_output_file() -> None:
    spec = bench_adapter("sglang.bench_serving").build(
        {"launcher": ["orch", "sim", "bench"], "args": {"output-file": "o.jsonl", "backend": "x"}},
        sglang_server(),
    )
    assert spec.argv == (
        "orch", "sim", "bench", "--base-url", "http://127.0.0.1:30000",
        "--output-file", "o.jsonl", "--backend", "x",
    )  # fmt: skip
    assert spec.result_file == "o.jsonl"


def test_bench_without_server_needs_base_url() -> None:
    with pytest.raises(InputError) as info:
        bench_adapter("sglang.bench_serving").build({"args": {}}, None)
    assert info.value.key_path == "args.base-url"
    spec = bench_adapter("sglang.bench_serving").build(
        {"args": {"base-url": "http://10.0.0.2:30000"}}, None
    )
    assert "--base-url" in spec.argv and "http://10.0.0.2:30000" in spec.argv


def repeat_dir(tmp_path: Path, result: str, name: str = "1") -> Path:
    d = tmp_path / "bench" / name
    d.mkdir(parents=True)
    shutil.copy(SG / result, d / "result.jsonl")
    return d


def cell(warmup: int = 0) -> Cell:
    return make_cell(
        bench=BenchSpec(argv=("x",), result_file="result.jsonl", warmup=warmup),
        server=sglang_server(),
    )


def parse(d: Path, c: Cell) -> RepeatResult:
    return bench_adapter("sglang.bench_serving").parse_repeat_with_sources(d, c)


def test_parse_2025_last_line(tmp_path: Path) -> None:
    result = parse(repeat_dir(tmp_path, "bench_serving.2025.jsonl"), cell())
    m = result.metrics
    assert m["output_throughput"] == pytest.approx(
        443.5547214167667
    )  # the last line, not the first
    assert m["duration"] == pytest.approx(0.28857769700016433)
    assert m["completed"] == 4
    assert m["mean_ttft_ms"] == pytest.approx(3.8244067501409518)
    assert m["p99_itl_ms"] == pytest.approx(2.3186685199743806)
    assert m["p95_itl_ms"] == pytest.approx(2.2487487501621217)
    assert "total_throughput" not in m and "p90_ttft_ms" not in m
    assert m["accept_length"] == 2.41
    assert result.sources["accept_length"] == "bench_result"
    assert result.sources["output_throughput"] == "result.jsonl"
    assert any("cumulative since server start" in n for n in result.notes)


def test_parse_2026_fields(tmp_path: Path) -> None:
    m = parse(repeat_dir(tmp_path, "bench_serving.2026.jsonl"), cell()).metrics
    assert m["total_throughput"] == pytest.approx(280.29196)
    assert m["input_throughput"] == pytest.approx(186.8613)
    for lat in ("ttft", "itl", "tpot", "e2e_latency"):
        for stat in ("mean", "median", "p90", "p95", "p99"):
            assert f"{stat}_{lat}_ms" in m
    assert "request_rate" not in m  # Infinity is not a metric
    # token totals, spreads and concurrency are kept (issue 11 item 9)
    assert m["std_ttft_ms"] == pytest.approx(1.1688)
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (32768, 16384)
    assert m["total_output_tokens_retokenized"] == 16379
    assert m["concurrency"] == pytest.approx(0.99961)
    assert m["max_output_tokens_per_s"] == 118.0 and m["max_concurrent_requests"] == 1


def test_zero_accept_length_is_absent(tmp_path: Path) -> None:
    d = tmp_path / "bench" / "1"
    d.mkdir(parents=True)
    row = json.loads((SG / "bench_serving.2026.jsonl").read_text())
    row["accept_length"] = 0.0
    (d / "result.jsonl").write_text(json.dumps(row) + "\n")
    assert "accept_length" not in parse(d, cell()).metrics


def write_info(cell_dir: Path, moment: str, states: list[dict[str, Any]]) -> None:
    (cell_dir / "captures").mkdir(exist_ok=True)
    doc = {"tp_size": 8, "internal_states": states}
    (cell_dir / "captures" / f"server_info.{moment}.json").write_text(json.dumps(doc))


def test_accept_length_from_counter_delta(tmp_path: Path) -> None:
    d = repeat_dir(tmp_path, "bench_serving.2026.jsonl", "2")
    write_info(tmp_path, "after-1", [{"avg_spec_accept_length": 2.5, "spec_accept_count": 1000}])
    write_info(tmp_path, "after-2", [{"avg_spec_accept_length": 2.3, "spec_accept_count": 2000}])
    result = parse(d, cell(warmup=1))
    # (2.3 * 2000 - 2.5 * 1000) / 1000
    assert result.metrics["accept_length"] == pytest.approx(2.1)
    assert result.sources["accept_length"] == "server_info_delta"


def test_accept_length_first_run_after_warmup_uses_warmup_capture(tmp_path: Path) -> None:
    d = repeat_dir(tmp_path, "bench_serving.2026.jsonl", "1")
    write_info(tmp_path, "ready", [{"avg_spec_accept_length": 9.0, "spec_accept_count": 1}])
    write_info(
        tmp_path,
        "after-warmup-2",
        [
            {"spec_accept_tokens": 100, "spec_accept_count": 50},
            {"spec_accept_tokens": 120, "spec_accept_count": 50},
        ],
    )
    write_info(
        tmp_path,
        "after-1",
        [
            {"spec_accept_tokens": 340, "spec_accept_count": 150},
            {"spec_accept_tokens": 360, "spec_accept_count": 150},
        ],
    )
    result = parse(d, cell(warmup=2))
    assert result.metrics["accept_length"] == pytest.approx((240 + 240) / 200)
    assert result.sources["accept_length"] == "server_info_delta"


def test_accept_length_no_accepts_before_run(tmp_path: Path) -> None:
    d = repeat_dir(tmp_path, "bench_serving.2026.jsonl", "warmup-1")
    shutil.copytree(SG, tmp_path / "captures", ignore=shutil.ignore_patterns("*.log", "*.jsonl"))
    result = parse(d, cell(warmup=1))
    assert result.metrics["accept_length"] == 2.38  # ready had none: after-warmup-1 is the run's
    assert result.sources["accept_length"] == "server_info_delta"


def test_accept_length_without_counters_falls_back(tmp_path: Path) -> None:
    d = repeat_dir(tmp_path, "bench_serving.2026.jsonl", "2")
    shutil.copytree(SG, tmp_path / "captures", ignore=shutil.ignore_patterns("*.log", "*.jsonl"))
    result = parse(d, cell(warmup=1))
    assert result.sources["accept_length"] == "bench_result"
    assert result.metrics["accept_length"] == 2.41
    assert any("no cumulative accept counters" in n for n in result.notes)

    # with no accept length in the result either, the cumulative server value is used
    row = json.loads((SG / "bench_serving.2026.jsonl").read_text())
    del row["accept_length"]
    (d / "result.jsonl").write_text(json.dumps(row) + "\n")
    result = parse(d, cell(warmup=1))
    assert result.sources["accept_length"] == "server_info_cumulative"
    assert result.metrics["accept_length"] == 2.42


def test_accept_length_counter_reset(tmp_path: Path) -> None:
    d = repeat_dir(tmp_path, "bench_serving.2026.jsonl", "3")
    write_info(tmp_path, "after-2", [{"avg_spec_accept_length": 2.5, "spec_accept_count": 900}])
    write_info(tmp_path, "after-3", [{"avg_spec_accept_length": 2.2, "spec_accept_count": 400}])
    result = parse(d, cell())
    assert result.metrics["accept_length"] == 2.2
    assert any("reset" in n for n in result.notes)


def test_missing_result_file_is_a_note(tmp_path: Path) -> None:
    d = tmp_path / "bench" / "1"
    d.mkdir(parents=True)
    result = parse(d, cell())
    assert result.metrics == {}
    assert any("result.jsonl" in n for n in result.notes)


def test_one_batch_server_argv() -> None:
    spec = bench_adapter("sglang.bench_one_batch_server").build(
        {"args": {"batch-size": [1, 8], "input-len": 1024, "output-len": 512}}, sglang_server()
    )
    assert spec.argv == (
        "python3", "-m", "sglang.bench_one_batch_server",
        "--base-url", "http://127.0.0.1:30000", "--result-filename", "result.jsonl",
        "--batch-size", "1", "8", "--input-len", "1024", "--output-len", "512",
    )  # fmt: skip
    assert spec.result_file == "result.jsonl"


def test_one_batch_server_parse(tmp_path: Path) -> None:
    adapter = bench_adapter("sglang.bench_one_batch_server")
    d = repeat_dir(tmp_path, "bench_one_batch_server.eagle3.jsonl")
    m = adapter.parse_repeat(d, cell())
    assert m["accept_length"] == 2.43
    assert m["latency"] == 5.52
    assert set(m) == {
        "latency",
        "input_throughput",
        "output_throughput",
        "overall_throughput",
        "last_ttft",
        "last_gen_throughput",
        "accept_length",
    }

    d2 = repeat_dir(tmp_path, "bench_one_batch_server.sweep.jsonl", "2")
    m2 = adapter.parse_repeat(d2, cell())
    assert m2["latency.bs1_in1024_out512"] == 5.81
    assert m2["latency.bs8_in1024_out512"] == 7.34
    assert "accept_length.bs1_in1024_out512" not in m2  # -1: not measured
    assert "last_gen_throughput.bs8_in1024_out512" not in m2
    assert "last_gen_throughput.bs1_in1024_out512" in m2
