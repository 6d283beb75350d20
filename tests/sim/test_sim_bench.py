"""`sim bench`: bench_serving's JSONL (the sample's fields), numbers that follow the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.sim import bench as sim_bench
from orchestrator.sim import model as m

from .simhelpers import SPEC_FLAGS, TIME_SCALE, TUNED, run_bench, sim_server, write_model

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures/sglang/sglang-0.4.10-bench_serving.jsonl"
SAMPLE_KEYS = [
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "sharegpt_output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "duration",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "total_output_tokens_retokenized",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "mean_e2e_latency_ms",
    "median_e2e_latency_ms",
    "std_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "std_itl_ms",
    "p95_itl_ms",
    "p99_itl_ms",
    "concurrency",
    "accept_length",
]


def test_sample_keys_match_the_real_sample() -> None:
    assert list(json.loads(SAMPLE.read_text().splitlines()[0])) == SAMPLE_KEYS


def test_bench_writes_bench_serving_jsonl_matching_the_model(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_model(repo)
    flags = ["--tp", "8", "--disable-custom-all-reduce", "--noise", "0", *SPEC_FLAGS]
    with sim_server(repo, flags, TUNED) as srv:
        run_dir = tmp_path / "run"
        args = [
            "--random-input-len",
            "512",
            "--random-output-len",
            "256",
            "--num-prompts",
            "4",
            "--max-concurrency",
            "1",
            "--unknown-flag",
            "7",
        ]
        first = run_bench(run_dir, srv.url, *args)
        assert first.returncode == 0, first.stderr
        second = run_bench(run_dir, srv.url, *args)
        assert second.returncode == 0, second.stderr
        oai = run_bench(run_dir / "oai", srv.url, *args, "--backend", "sglang-oai")
        assert oai.returncode == 0, oai.stderr
    lines = (run_dir / "result.jsonl").read_text().splitlines()
    assert len(lines) == 2  # appended, one object per run
    row = json.loads(lines[-1])
    assert list(row) == SAMPLE_KEYS
    assert row["request_rate"] == float("inf") and "Infinity" in lines[-1]
    assert row["completed"] == 4
    assert row["total_input_tokens"] == 4 * 512
    assert row["total_output_tokens"] == 4 * 256
    assert row["total_output_tokens_retokenized"] == 4 * 256
    cfg = m.ServingConfig(
        tp=8,
        disable_custom_all_reduce=True,
        speculative_algorithm="EAGLE3",
        num_steps=2,
        num_draft_tokens=3,
    )
    expected = m.predict_output_throughput(m.model_params(), cfg, TUNED, 512, 256)
    # The client's real HTTP overhead only ever lowers a reading (most on a loaded machine).
    assert 0.85 * expected < row["output_throughput"] < 1.03 * expected
    assert row["accept_length"] == pytest.approx(1.936, abs=0.15)
    assert row["mean_tpot_ms"] == pytest.approx(1000 / expected, rel=0.1)
    # SGLang's client spreads a chunk's gap (~1.9 tokens under EAGLE-3) over its tokens, so its
    # ITL is per token like TPOT; a per-chunk ITL would read ~1.9x TPOT.
    assert row["mean_itl_ms"] == pytest.approx(row["mean_tpot_ms"], rel=0.1)
    assert row["concurrency"] == pytest.approx(1.0, abs=0.1)
    assert "Serving Benchmark Result" in second.stdout
    assert f"sim bench: timings divided by the server's time scale {TIME_SCALE:g}" in second.stdout
    oai_row = json.loads((run_dir / "oai" / "result.jsonl").read_text())
    # The OpenAI client counts one gap per chunk: ~accept length times the per-token ITL.
    assert oai_row["mean_itl_ms"] > 1.4 * row["mean_itl_ms"]
    assert oai_row["total_output_tokens"] == 4 * 256
    assert "Output token throughput (tok/s):" in second.stdout


def test_bench_without_speculation_and_with_concurrency(tmp_path: Path) -> None:
    write_model(tmp_path / "repo")
    with sim_server(tmp_path / "repo", ["--tp", "8", "--noise", "0"]) as srv:
        one = run_bench(
            tmp_path / "c1",
            srv.url,
            "--random-input-len",
            "64",
            "--random-output-len",
            "256",
            "--num-prompts",
            "4",
            "--max-concurrency",
            "1",
        )
        four = run_bench(
            tmp_path / "c4",
            srv.url,
            "--random-input-len",
            "64",
            "--random-output-len",
            "128",
            "--num-prompts",
            "8",
            "--max-concurrency",
            "4",
            "--backend",
            "sglang-oai",
        )
    assert one.returncode == 0 and four.returncode == 0, one.stderr + four.stderr
    r1 = json.loads((tmp_path / "c1/result.jsonl").read_text())
    r4 = json.loads((tmp_path / "c4/result.jsonl").read_text())
    assert r1["accept_length"] is None
    predicted = m.predict_output_throughput(m.model_params(), m.ServingConfig(tp=8), {}, 64, 256)
    assert 0.85 * predicted < r1["output_throughput"] < 1.02 * predicted  # overhead only lowers
    # Batching: four requests at once give nearly four times the throughput.
    assert r4["output_throughput"] > 3 * r1["output_throughput"]
    assert r4["total_output_tokens"] == 8 * 128


def test_bench_fails_without_a_server(tmp_path: Path) -> None:
    from .simhelpers import free_port

    out = run_bench(
        tmp_path,
        f"http://127.0.0.1:{free_port()}",
        "--num-prompts",
        "2",
        "--random-output-len",
        "4",
        "--timeout",
        "5",
    )
    assert out.returncode == 1
    assert not (tmp_path / "result.jsonl").exists()


STREAM = Path(__file__).resolve().parents[1] / "fixtures/sglang/stream.generate.eagle3.json"


def recorded_stream() -> list[sim_bench.Chunk]:
    data = json.loads(STREAM.read_text())
    return [sim_bench.Chunk(at, tokens) for at, tokens in data["chunks"]]


def test_sglang_spreads_a_chunk_s_gap_over_its_tokens() -> None:
    ttft, itl = sim_bench.stream_timings("sglang", recorded_stream())
    assert ttft == pytest.approx(0.050)
    # 2, 2, 1, 2 new tokens, a chunk with none (skipped, not a new reference), then 2 over 32 ms.
    expected = [0.008, 0.008, 0.008, 0.008, 0.016, 0.008, 0.008, 0.016, 0.016]
    assert itl == pytest.approx(expected)
    assert len(itl) == 10 - 1  # one ITL per token after the first
    assert sim_bench.stream_timings("sglang-native", recorded_stream())[1] == pytest.approx(itl)


def test_openai_backends_count_one_gap_per_chunk() -> None:
    for backend in ("sglang-oai", "vllm"):
        ttft, itl = sim_bench.stream_timings(backend, recorded_stream())
        assert ttft == pytest.approx(0.050)
        assert itl == pytest.approx([0.016] * 6)


def test_an_empty_stream_has_no_timings() -> None:
    assert sim_bench.stream_timings("sglang", []) == (0.0, [])
