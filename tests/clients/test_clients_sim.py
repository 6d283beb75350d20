"""GuideLLM and AIPerf, the real clients, driven by `orch apply` against `orch sim serve` (its
OpenAI-compatible /v1/completions): each cell passes, its metrics are the client's own file
read with units, and `orch report` and `orch diff` show them. One multi-turn, shared-prefix
GuideLLM workload; one AIPerf run per cell with a seed of its own. A word-level tokenizer over
the simulator's words makes AIPerf's token counts the server's; GuideLLM needs a real BPE
tokenizer for its synthetic prompts (the tiny Llama's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from wordtokenizer import word_tokenizer

from orchestrator.adapters.aiperf import export_metrics
from orchestrator.adapters.guidellm import report_metrics

from .clients_helpers import free_port, orch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCALE = 0.01
SERVE = ["{{ orch_python }}", "-m", "orchestrator.sim", "serve"]
PLAYBOOK = """\
name: clients
vars: {{client: "", tokenizer: ""}}
matrix:
  output_len: {lengths}
env: {{ORCH_SIM_TIME_SCALE: "{scale}"}}
server:
  adapter: sglang
  launcher: {serve}
  args: {{model-path: m, host: 127.0.0.1, port: {port}, startup-time: 0}}
  ready: {{timeout: 60}}
bench:
{bench}
  repeats: 1
"""
GUIDELLM = """\
  adapter: guidellm
  python: "{{ client }}"
  args:
    backend: {kind: openai_http, model: m, request_format: /v1/completions}
    tokenizer: {kind: huggingface_auto, model: "{{ tokenizer }}"}
    profile: {kind: concurrent, streams: 2}
    constraint: [{kind: max_requests, count: 4}]
    data:  # multi-turn, over one shared prefix
      - {kind: synthetic_text, prompt_tokens: 16, output_tokens: "{{ matrix.output_len }}",
         prefix_tokens: 8, prefix_count: 1, turns: 2}
"""
AIPERF = """\
  adapter: aiperf
  python: "{{ client }}"
  args:
    model: m
    endpoint-type: completions
    streaming: true
    tokenizer: "{{ tokenizer }}"
    request-count: 4
    concurrency: 2
    prompt-input-tokens-mean: 16
    prompt-input-tokens-stddev: 0
    prompt-output-tokens-mean: "{{ matrix.output_len }}"
    prompt-output-tokens-stddev: 0
    extra-inputs: ["ignore_eos:true"]
    no-server-metrics: true
    no-gpu-telemetry: true
"""


def _apply(
    tmp_path: Path, bench: str, python: str, tokenizer: str | Path, lengths: list[int]
) -> Path:
    playbook = tmp_path / "clients.yml"
    playbook.write_text(
        PLAYBOOK.format(
            scale=SCALE, serve=json.dumps(SERVE), port=free_port(), bench=bench, lengths=lengths
        )
    )
    results = tmp_path / "results"
    proc = orch(
        tmp_path / "home", "apply", str(playbook), "-e", f"client={python}",
        "-e", f"tokenizer={tokenizer}", "--results", str(results), timeout=540,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = [p for p in results.iterdir() if (p / "run.json").is_file()]
    return run


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def _cells(run: Path) -> dict[int, Path]:
    return {
        load(c / "cell.json")["cell"]["axes"]["output_len"]: c for c in (run / "cells").iterdir()
    }


def _report(run: Path, home: Path) -> None:
    report = orch(home, "report", str(run), "--format", "json")
    assert report.returncode == 0, report.stderr
    assert "output_throughput" in report.stdout and "p99_ttft_ms" in report.stdout


def _diff(cells: dict[int, Path], home: Path) -> None:
    diff = orch(home, "diff", str(cells[4]), str(cells[8]))
    assert diff.returncode == 0, diff.stderr
    assert "output_throughput" in diff.stdout


def test_guidellm_multi_turn_shared_prefix_against_the_simulator(
    tmp_path: Path, guidellm_python: str, tiny_tokenizer: str
) -> None:
    run = _apply(tmp_path, GUIDELLM, guidellm_python, tiny_tokenizer, [4, 8])
    cells = _cells(run)
    for output_len, cell in cells.items():
        doc = load(cell / "cell.json")
        assert doc["status"] == "passed", doc["reason"]
        (repeat,) = load(cell / "metrics.json")["repeats"]
        report = load(cell / "bench" / "1" / "benchmarks.json")
        theirs, _ = report_metrics(report)
        assert repeat["completed"] == theirs["completed"] == 4
        # streamed one token a chunk: GuideLLM counts the server's tokens
        assert repeat["total_output_tokens"] == theirs["total_output_tokens"] == 4 * output_len
        # the simulator's seconds: the client's timings divided by its time scale
        assert repeat["mean_ttft_ms"] == pytest.approx(theirs["mean_ttft_ms"] / SCALE)
        turns = report["benchmarks"][0]["metrics"]["turns"]
        assert [t["turn_index"] for t in turns] == [0, 1]  # two turns per conversation
    _report(run, tmp_path / "home")
    _diff(cells, tmp_path / "home")


def test_aiperf_against_the_simulator(tmp_path: Path, aiperf_python: str) -> None:
    tokenizer = word_tokenizer(aiperf_python, tmp_path / "tok")
    run = _apply(tmp_path, AIPERF, aiperf_python, tokenizer, [4])  # one cell: diff is GuideLLM's
    cells = _cells(run)
    for output_len, cell in cells.items():
        doc = load(cell / "cell.json")
        assert doc["status"] == "passed", doc["reason"]
        (repeat,) = load(cell / "metrics.json")["repeats"]
        theirs, notes = export_metrics(load(cell / "bench" / "1" / "profile_export_aiperf.json"))
        assert repeat["completed"] == theirs["completed"] == 4 and repeat["failed"] == 0
        assert repeat["total_output_tokens"] == 4 * output_len, notes
        assert repeat["p99_e2e_latency_ms"] == pytest.approx(theirs["p99_e2e_latency_ms"] / SCALE)
        argv = load(cell / "cell.json")["cell"]["bench"]["argv"]
        assert argv[argv.index("--url") + 1].startswith("http://127.0.0.1:")
        assert "--random-seed" in load(cell / "bench" / "1" / "exit.json")["argv"]
    _report(run, tmp_path / "home")
