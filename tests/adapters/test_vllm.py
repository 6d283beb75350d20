"""vllm and vllm.bench_serve: argv with the speculative config, /health, logs, result JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.cell import BenchSpec
from orchestrator.errors import InputError

from .cells import FIXTURES, make_cell

VL = FIXTURES / "vllm"
SPEC = {
    "method": "eagle3",
    "model": "/models/EAGLE3-LLaMA3.3-Instruct-70B",
    "num_speculative_tokens": 3,
}


def test_serve_argv_with_speculative_config() -> None:
    spec = server_adapter("vllm").build(
        {
            "args": {
                "model": "/models/Llama-3.3-70B-Instruct",
                "tensor_parallel_size": 8,
                "disable-custom-all-reduce": True,
                "speculative-config": SPEC,
                "served-model-name": ["llama", "default"],
                "enforce-eager": False,
            }
        }
    )
    argv = list(spec.argv)
    assert argv[:3] == ["vllm", "serve", "/models/Llama-3.3-70B-Instruct"]
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == SPEC
    assert argv[i + 2 :] == ["--served-model-name", "llama", "default", "--port", "8000"]
    assert argv[3:6] == ["--tensor-parallel-size", "8", "--disable-custom-all-reduce"]
    assert "--enforce-eager" not in argv
    assert spec.ready.url == "http://127.0.0.1:8000/health"
    assert spec.ready.log is None
    assert spec.ready.timeout == 1200.0
    assert spec.args["model"] == "/models/Llama-3.3-70B-Instruct"


def test_serve_launcher_host_and_missing_model() -> None:
    spec = server_adapter("vllm").build(
        {"launcher": "/opt/vllm/bin/vllm serve", "args": {"model": "m", "host": "10.1.2.3"}}
    )
    assert spec.argv[:3] == ("/opt/vllm/bin/vllm", "serve", "m")
    assert spec.ready.url == "http://10.1.2.3:8000/health"
    with pytest.raises(InputError) as info:
        server_adapter("vllm").build({"args": {"tp": 8}})
    assert info.value.key_path == "args.model"


def test_analyze_log(tmp_path: Path) -> None:
    shutil.copy(VL / "server.eagle3-tp8.log", tmp_path / "server.log")
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_MIN_NCHANNELS": "32",
        "NCCL_CROSS_NIC": "1",
        "NCCL_ALGO": "Ring",
    }
    out = server_adapter("vllm").analyze(tmp_path, make_cell(env=env))
    # no measured repeat to place the lines in: the whole life is a fact, never a metric
    # (per-repeat log metrics: test_vllm_log.py)
    assert out["metrics"] == {}
    spec = out["facts"]["spec_decoding"]
    assert spec["mean_acceptance_length"]["mean"] == pytest.approx((2.38 + 2.44 + 2.41) / 3)
    assert spec["accepted_tokens"] / spec["drafted_tokens"] == pytest.approx(
        (478 + 507 + 499) / (1044 + 1056 + 1053)
    )
    # idle 0.0 lines left out
    assert out["facts"]["generation_throughput"]["median"] == pytest.approx(89.7)
    assert out["facts"]["spec_decoding"]["per_position_acceptance_rate"] == [0.744, 0.438, 0.228]
    assert out["facts"]["nccl"]["version"] == "2.26.2+cuda12.8"
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["nccl_env:NCCL_MIN_NCHANNELS"]["ok"] is True
    # one worker of eight never took NCCL_ALGO: the check names it
    assert checks["nccl_env:NCCL_ALGO"]["ok"] is False
    assert checks["nccl_env:NCCL_ALGO"]["detail"] == (
        "NCCL_ALGO reported by 7 of 8 NCCL processes; never by pid 51315"
    )


def test_bench_serve_argv() -> None:
    server = server_adapter("vllm").build({"args": {"model": "m", "port": 8001}})
    spec = bench_adapter("vllm.bench_serve").build(
        {"args": {"dataset-name": "random", "num-prompts": 32, "max-concurrency": 1}, "repeats": 5},
        server,
    )
    assert spec.argv == (
        "vllm", "bench", "serve", "--base-url", "http://127.0.0.1:8001",
        "--dataset-name", "random", "--num-prompts", "32", "--max-concurrency", "1",
        "--save-result", "--result-dir", ".", "--result-filename", "result.json",
    )  # fmt: skip
    assert spec.result_file == "result.json"
    assert spec.repeats == 5


def test_bench_serve_parse(tmp_path: Path) -> None:
    shutil.copy(VL / "bench_serve.eagle3.json", tmp_path / "result.json")
    cell = make_cell(bench=BenchSpec(argv=("x",), result_file="result.json"))
    result = bench_adapter("vllm.bench_serve").parse_repeat_with_sources(tmp_path, cell)
    m = result.metrics
    assert m["output_throughput"] == pytest.approx(90.4983)
    assert m["total_throughput"] == pytest.approx(271.495)
    assert m["accept_length"] == 2.41
    # one unit per quantity: vLLM's percentage becomes a fraction, as the log's rate is
    assert m["draft_acceptance_rate"] == pytest.approx(0.4712)
    assert "spec_decode_acceptance_rate" not in m
    assert m["mean_e2e_latency_ms"] == 5657.5
    assert m["p99_ttft_ms"] == pytest.approx(102.3 * 1.04)
    assert m["completed"] == 32 and m["failed"] == 0
    assert "request_rate" not in m
    assert result.sources["accept_length"] == "result.json"
