"""GuideLLM, the real client, against the real engine: vLLM's CPU build serving the tiny Llama,
its tokenizer read from the model's folder with HF_HUB_OFFLINE=1. The cell passes, its metrics
are GuideLLM's own report read field for field, and the requests GuideLLM counts are the ones
the engine served."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from clients.clients_helpers import client_python

from orchestrator.adapters.guidellm import report_metrics

from .conftest import Engine
from .engine_helpers import free_port, load, only_run, orch_env

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(900)]

PLAYBOOK = """\
name: guidellm-cpu
env:
  VLLM_CPU_KVCACHE_SPACE: "1"
  HF_HUB_OFFLINE: "1"          # the model and tokenizer are local folders
server:
  adapter: vllm
  python: "{{ engine_python }}"
  args: {model: "{{ model }}", host: 127.0.0.1, port: "{{ port }}", max-num-seqs: 4,
         max-model-len: 512, enforce-eager: true}
  ready: {timeout: 600}
  stop_grace: 30
bench:
  adapter: guidellm
  python: "{{ client }}"
  args:
    backend: {kind: openai_http, model: "{{ model }}", request_format: /v1/completions}
    tokenizer: {kind: huggingface_auto, model: "{{ model }}"}
    profile: {kind: concurrent, streams: 2}
    constraint: [{kind: max_requests, count: 4}]
    data: [{kind: synthetic_text, prompt_tokens: 32, output_tokens: 16}]
  repeats: 1
"""


def test_guidellm_against_vllm_cpu(engine: Engine, tmp_path: Path) -> None:
    client = client_python("ORCH_GUIDELLM_PYTHON", "guidellm")
    playbook = tmp_path / "guidellm_cpu.yml"
    playbook.write_text(PLAYBOOK)
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "apply", str(playbook),
         "-e", f"engine_python={engine.python}", "-e", f"model={engine.model}",
         "-e", f"client={client}", "-e", f"port={free_port()}", "--results", str(results)],
        capture_output=True, text=True, env=orch_env(tmp_path / "home"), timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (cell,) = (only_run(results) / "cells").iterdir()
    assert load(cell / "cell.json")["status"] == "passed"
    (repeat,) = load(cell / "metrics.json")["repeats"]
    theirs, _ = report_metrics(load(cell / "bench" / "1" / "benchmarks.json"))
    assert {k: repeat[k] for k in theirs} == theirs  # GuideLLM's own numbers, field for field
    assert repeat["completed"] == 4 and repeat["failed"] == 0
    assert repeat["total_output_tokens"] == 4 * 16  # ignore_eos: every request ran to its length
    assert repeat["total_input_tokens"] == 4 * 32
    served = (cell / "server.log").read_text()
    assert served.count('POST /v1/completions HTTP/1.1" 200') >= 4
