"""Each adapter's metric catalogue (issue 11 items 7, 9, 10): it lists exactly what a client
version writes, one unit per quantity, the token totals are kept and a client/server length
mismatch is flagged; `expect:` names are checked against it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.adapters import (
    BENCH_ADAPTERS,
    SERVER_ADAPTERS,
    TELEMETRY_CATALOGUE,
    bench_adapter,
    metric_unit,
    server_adapter,
    unknown_metric_hint,
)
from orchestrator.adapters.sglang_bench import V2025, V2026
from orchestrator.analyze.metrics import metric_units
from orchestrator.cell import BenchSpec, Cell

from .cells import FIXTURES, make_cell

SG = FIXTURES / "sglang"


def _serving_cell() -> Cell:
    return make_cell(bench=BenchSpec(argv=("x",), result_file="result.jsonl"))


def _parse_serving(tmp_path: Path, row: dict[str, object]) -> tuple[dict[str, float], list[str]]:
    d = tmp_path / "bench" / "1"
    d.mkdir(parents=True, exist_ok=True)
    (d / "result.jsonl").write_text(json.dumps(row) + "\n")
    result = bench_adapter("sglang.bench_serving").parse_repeat_with_sources(d, _serving_cell())
    return result.metrics, result.notes


@pytest.mark.parametrize(
    ("fixture", "version"),
    [
        ("bench_serving.2025.jsonl", V2025),
        ("sglang-0.4.10-bench_serving.jsonl", V2025),
        ("bench_serving.2026.jsonl", V2026),
    ],
)
def test_bench_serving_lists_exactly_what_a_version_writes(
    tmp_path: Path, fixture: str, version: str
) -> None:
    row = json.loads((SG / fixture).read_text().splitlines()[-1])
    metrics, _ = _parse_serving(tmp_path, row)
    listed = {
        i.name for i in bench_adapter("sglang.bench_serving").catalogue() if version in i.versions
    }
    assert set(metrics) == listed
    assert "total_throughput" not in listed or version == V2026  # 0.4.10 never writes it


def test_every_parsed_metric_is_in_its_adapters_catalogue(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "vllm" / "bench_serve.eagle3.json", tmp_path / "result.json")
    vllm = bench_adapter("vllm.bench_serve")
    cell = make_cell(bench=BenchSpec(argv=("x",), result_file="result.json"))
    metrics = vllm.parse_repeat_with_sources(tmp_path, cell).metrics
    assert metrics and all(vllm.knows(name) for name in metrics), sorted(metrics)
    assert metrics["std_ttft_ms"] == 1.5345 and "total_output_tokens" in metrics
    one = bench_adapter("sglang.bench_one_batch_server")
    d = tmp_path / "one" / "1"
    d.mkdir(parents=True)
    shutil.copy(SG / "bench_one_batch_server.sweep.jsonl", d / "result.jsonl")
    cell = make_cell(bench=BenchSpec(argv=("x",), result_file="result.jsonl"))
    swept = one.parse_repeat_with_sources(d, cell).metrics
    assert swept and all(one.knows(name) for name in swept), sorted(swept)


def test_one_unit_per_quantity_across_adapters() -> None:
    infos = [i for name in BENCH_ADAPTERS for i in bench_adapter(name).catalogue()]
    infos += [i for name in SERVER_ADAPTERS for i in server_adapter(name).catalogue()]
    infos += list(TELEMETRY_CATALOGUE)
    rates = {i.name: i.unit for i in infos if "acceptance_rate" in i.name}
    assert rates == {"draft_acceptance_rate": "fraction", "log_draft_acceptance_rate": "fraction"}
    for info in infos:
        assert info.better in ("higher", "lower", "neither"), info
        if info.name.endswith("_ms"):
            assert info.unit == "ms", info
        if info.name.endswith("_throughput") or info.name.endswith("_per_s"):
            assert info.unit in ("tok/s", "req/s"), info
        if "accept_len" in info.name:
            assert info.unit == "tokens/step", info


def test_units_are_recorded_for_every_metric() -> None:
    document = {
        "repeats": [{"n": 1, "output_throughput": 90.0, "draft_acceptance_rate": 0.47, "x": 1}],
        "server": {"log_draft_acceptance_rate": 0.46},
    }
    assert metric_units(document, "vllm.bench_serve", "vllm") == {
        "output_throughput": "tok/s",
        "draft_acceptance_rate": "fraction",
        "x": None,  # a regex metric: no catalogue knows its unit
        "log_draft_acceptance_rate": "fraction",
    }
    assert metric_unit("output_throughput.bs1_in128_out32", "sglang.bench_one_batch_server") == (
        "tok/s"
    )
    assert metric_unit("energy_j", "generic") == "J"
    assert metric_unit("throttle_s.hw_slowdown", "generic") == "s"


def test_a_retokenized_output_far_from_the_servers_count_is_flagged(tmp_path: Path) -> None:
    row = json.loads((SG / "bench_serving.2026.jsonl").read_text())
    _, notes = _parse_serving(tmp_path, row)  # 16379 vs 16384: within 5%
    assert not any(n.startswith("flag:") for n in notes)
    row.update(total_output_tokens=210, total_output_tokens_retokenized=82)  # issue 11 item 2
    metrics, notes = _parse_serving(tmp_path, row)
    assert (metrics["total_output_tokens"], metrics["total_output_tokens_retokenized"]) == (210, 82)
    (flag,) = [n for n in notes if n.startswith("flag:")]
    assert "retokenized output 82 tokens vs the server's 210" in flag and "61%" in flag


@pytest.mark.parametrize(
    ("bench", "name", "hint"),
    [
        ("sglang.bench_serving", "median_ttft", "did you mean 'median_ttft_ms'?"),
        ("sglang.bench_serving", "elapsed_msec", "see `orch metrics sglang.bench_serving`"),
        ("vllm.bench_serve", "spec_decode_acceptance_rate", "renamed: write draft_acceptance"),
        ("sglang.bench_one_batch_server", "latency.bs1", "see `orch metrics"),
        # log_gen_throughput is per repeat for vllm.bench_serve (from the vllm server's log)
        ("sglang.bench_serving", "log_draft_acceptance_rate", "a vllm server metric"),
    ],
)
def test_an_unknown_expect_name_gets_the_nearest_known_one(
    bench: str, name: str, hint: str
) -> None:
    found = unknown_metric_hint(bench, name)
    assert found is not None and hint in found, found


@pytest.mark.parametrize(
    ("bench", "name"),
    [
        ("generic", "elapsed_msec"),  # open-ended: anything its result file holds
        ("sglang.bench_serving", "total_output_tokens"),
        ("sglang.bench_serving", "energy_j"),  # telemetry metrics come with every adapter
        ("vllm.bench_serve", "p99.9_ttft_ms"),  # --metric-percentiles asks for any
        ("sglang.bench_one_batch_server", "output_throughput.bs8_in1024_out512"),
    ],
)
def test_known_names_pass(bench: str, name: str) -> None:
    assert unknown_metric_hint(bench, name) is None


def test_a_declared_regex_metric_is_known() -> None:
    assert unknown_metric_hint("sglang.bench_serving", "my_gauge", ["my_gauge"]) is None
