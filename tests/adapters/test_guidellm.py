"""GuideLLM's adapter: its registry flags built from a playbook's args, and a real benchmarks
JSON (guidellm 0.8.1 against `orch sim serve`, tests/fixtures/guidellm/README.md) read field
for field with orch's units."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.adapters import bench_adapter, metric_unit, server_adapter, unknown_metric_hint
from orchestrator.adapters.guidellm import CATALOGUE, report_metrics
from orchestrator.analyze.investigate.factors import declared_factors, swapped
from orchestrator.cell import BenchSpec
from orchestrator.errors import InputError

from .cells import FIXTURES, make_cell

REPORT = FIXTURES / "guidellm" / "guidellm-0.8.1-benchmarks.json"
MULTI_TURN = FIXTURES / "guidellm" / "guidellm-0.8.1-multiturn-benchmarks.json"
BENCH = BenchSpec(adapter="guidellm", argv=("x",), result_file="benchmarks.json")


def _server() -> object:
    return server_adapter("vllm").build({"args": {"model": "m", "port": 8001}})


def test_argv_aims_the_backend_at_the_server_and_repeats_list_flags() -> None:
    section = {
        "python": "/venv/bin/python",
        "args": {
            "backend": {"kind": "openai_http", "request_format": "/v1/completions"},
            "profile": {"kind": "concurrent", "streams": 2},
            "constraint": [{"kind": "max_requests", "count": 6}],
            "data": [{"kind": "synthetic_text", "prompt_tokens": 32, "output_tokens": 8}],
        },
        "repeats": 2,
    }
    spec = bench_adapter("guidellm").build(section, _server())  # type: ignore[arg-type]
    backend = (
        '{"kind":"openai_http","request_format":"/v1/completions","target":"http://127.0.0.1:8001"}'
    )
    assert spec.argv == (
        "/venv/bin/python", "-m", "guidellm", "run",
        "--backend", backend,
        "--profile", '{"kind":"concurrent","streams":2}',
        "--constraint", '{"kind":"max_requests","count":6}',
        "--data", '{"kind":"synthetic_text","prompt_tokens":32,"output_tokens":8}',
        "--output", '{"kind":"json","path":"benchmarks.json"}',
        "--disable-console-interactive",
    )  # fmt: skip
    assert spec.result_file == "benchmarks.json" and spec.repeats == 2
    assert bench_adapter("guidellm").sends(spec) == (
        'data [{"kind":"synthetic_text","prompt_tokens":32,"output_tokens":8}] '
        'until [{"kind":"max_requests","count":6}]'
    )
    assert spec.args["backend"]["target"] == "http://127.0.0.1:8001"  # args render argv


def test_a_given_target_and_json_output_are_kept_and_bad_ones_refused() -> None:
    adapter = bench_adapter("guidellm")
    spec = adapter.build(
        {
            "args": {
                "backend": {"kind": "openai_http", "target": "http://h:1"},
                "output": [{"kind": "json", "path": "out.json"}, {"kind": "csv"}],
            }
        },
        None,
    )
    assert '{"kind":"openai_http","target":"http://h:1"}' in spec.argv
    assert spec.argv.count("--output") == 2 and spec.result_file == "out.json"
    with pytest.raises(InputError, match="server to aim at") as no_server:
        adapter.build({"args": {}}, None)
    assert no_server.value.key_path == "args.backend.target"
    with pytest.raises(InputError, match="exactly one json output"):
        adapter.build({"args": {"output": [{"kind": "csv"}]}}, _server())  # type: ignore[arg-type]
    with pytest.raises(InputError, match="mapping"):
        adapter.build({"args": {"backend": "openai_http"}}, _server())  # type: ignore[arg-type]


def test_a_real_report_is_read_field_for_field(tmp_path: Path) -> None:
    shutil.copy(REPORT, tmp_path / "benchmarks.json")
    cell = make_cell(
        bench=BenchSpec(adapter="guidellm", argv=("x",), result_file="benchmarks.json")
    )
    result = bench_adapter("guidellm").parse_repeat_with_sources(tmp_path, cell)
    bench = json.loads(REPORT.read_text())["benchmarks"][0]
    raw = bench["metrics"]

    def ok(name: str) -> dict[str, float]:
        return raw[name]["successful"]  # type: ignore[no-any-return]

    m = result.metrics
    assert m["completed"] == 6 and m["failed"] == 0 and m["incomplete"] == 0
    assert m["error_rate"] == 0
    assert m["request_throughput"] == ok("requests_per_second")["mean"]
    assert m["output_throughput"] == ok("output_tokens_per_second")["mean"]
    # GuideLLM's mean rate is the window's: output tokens over the measured duration
    assert m["output_throughput"] == pytest.approx(m["total_output_tokens"] / m["duration"])
    assert m["duration"] == pytest.approx(bench["duration"])
    assert m["total_output_tokens"] == 6 * 8 and m["total_input_tokens"] == 6 * 32
    assert m["mean_ttft_ms"] == ok("time_to_first_token_ms")["mean"]
    assert m["p99_itl_ms"] == ok("inter_token_latency_ms")["percentiles"]["p99"]
    assert m["std_tpot_ms"] == ok("time_per_output_token_ms")["std_dev"]
    # request_latency is in seconds in GuideLLM's report, ms in orch's
    assert m["median_e2e_latency_ms"] == pytest.approx(ok("request_latency")["median"] * 1000)
    assert set(m) == {info.name for info in CATALOGUE}  # the catalogue lists what 0.8.1 writes
    assert set(result.sources.values()) == {"benchmarks.json"} and result.notes == []


def test_a_multi_turn_report_gives_each_turn_its_own_names() -> None:
    report = json.loads(MULTI_TURN.read_text())
    metrics, _ = report_metrics(report)
    turns = report["benchmarks"][0]["metrics"]["turns"]
    assert metrics["completed.turn0"] + metrics["completed.turn1"] == metrics["completed"] == 6
    ttft = turns[1]["time_to_first_token_ms"]["successful"]
    assert metrics["mean_ttft_ms.turn1"] == ttft["mean"]
    latency = turns[0]["request_latency"]["successful"]["percentiles"]["p99"]
    assert metrics["p99_e2e_latency_ms.turn0"] == pytest.approx(latency * 1000)
    adapter = bench_adapter("guidellm")
    assert all(adapter.knows(name) for name in metrics)
    assert not adapter.knows("p95_ttft_ms.turn1") and not adapter.knows("mean_tpot_ms.turn0")
    twice = report_metrics({**report, "benchmarks": report["benchmarks"] * 2})[0]
    assert twice["mean_ttft_ms.b2.turn1"] == metrics["mean_ttft_ms.turn1"]
    assert adapter.knows("mean_ttft_ms.b2.turn1")
    assert json.loads(REPORT.read_text())["benchmarks"][0]["metrics"]["turns"] is None


def test_several_benchmarks_are_suffixed_and_known() -> None:
    report = json.loads(REPORT.read_text())
    report["benchmarks"] = report["benchmarks"] * 2
    metrics, notes = report_metrics(report)
    assert metrics["output_throughput.b1"] == metrics["output_throughput.b2"]
    assert "output_throughput" not in metrics
    assert notes == [f"b{i}: benchmark {i} of 2 (concurrent strategy)" for i in (1, 2)]
    adapter = bench_adapter("guidellm")
    assert adapter.knows("p99_ttft_ms.b2") and not adapter.knows("p99_ttft_ms.x")
    assert unknown_metric_hint("guidellm", "p99_ttft_ms") is None
    assert "did you mean 'p99_ttft_ms'" in (unknown_metric_hint("guidellm", "p99_ttf_ms") or "")


def test_units_come_from_the_catalogue() -> None:
    assert metric_unit("p99_e2e_latency_ms", "guidellm") == "ms"
    assert metric_unit("output_throughput.b2", "guidellm") == "tok/s"
    assert metric_unit("duration", "guidellm") == "s"


def test_a_missing_or_empty_report_says_why(tmp_path: Path) -> None:
    cell = make_cell(
        bench=BenchSpec(adapter="guidellm", argv=("x",), result_file="benchmarks.json")
    )
    adapter = bench_adapter("guidellm")
    assert adapter.parse_repeat_with_sources(tmp_path, cell).notes
    (tmp_path / "benchmarks.json").write_text('{"benchmarks": []}')
    result = adapter.parse_repeat_with_sources(tmp_path, cell)
    assert result.metrics == {} and result.notes == ["benchmarks.json holds no benchmarks"]


@pytest.mark.parametrize("adapter", ["guidellm", "aiperf"])
def test_investigate_swaps_a_bench_setting_in_the_rendered_argv(adapter: str) -> None:
    """A bench setting of these clients is a testable factor: BAD's argv, with GOOD's value set
    back, is what the adapter renders for GOOD."""
    args = {
        "guidellm": lambda n: {"profile": {"kind": "concurrent", "streams": n}},
        "aiperf": lambda n: {"model": "m", "concurrency": n, "extra-inputs": ["ignore_eos:true"]},
    }[adapter]

    def cell(n: int) -> dict[str, object]:
        spec = bench_adapter(adapter).build({"args": args(n)}, _server())  # type: ignore[arg-type]
        return make_cell(bench=spec).model_dump(mode="json")

    good, bad = cell(2), cell(4)
    (factor,) = declared_factors(good, bad)
    assert factor.kind == "bench_setting" and factor.testable, factor
    assert swapped(bad, [factor])["bench"]["argv"] == good["bench"]["argv"]  # type: ignore[index]


def test_requests_left_out_of_guidellm_s_window_are_flagged() -> None:
    # a real 0.8.1 report whose window closed before 2 of its 8 requests ended (fixtures README)
    short = json.loads(
        (FIXTURES / "guidellm" / "guidellm-0.8.1-short-window-benchmarks.json").read_text()
    )
    bench = short["benchmarks"][0]
    assert bench["scheduler_state"]["created_requests"] == len(bench["requests"]["successful"]) == 8
    metrics, notes = report_metrics(short)
    assert metrics["completed"] == 6
    assert notes == [
        "flag: GuideLLM created 8 requests, its statistics count 6: 2 ended outside its measured "
        "window or were still in flight"
    ]
    # one request in flight, in the second of two benchmarks: said once, for that benchmark
    whole = json.loads(REPORT.read_text())
    one_short = json.loads(json.dumps(whole["benchmarks"][0]))
    one_short["scheduler_state"]["created_requests"] += 1
    _, notes = report_metrics({**whole, "benchmarks": [whole["benchmarks"][0], one_short]})
    assert [n for n in notes if n.startswith("flag:")] == [
        "flag: GuideLLM created 7 requests, its statistics count 6: 1 ended outside its measured "
        "window or was still in flight (b2)"
    ]
