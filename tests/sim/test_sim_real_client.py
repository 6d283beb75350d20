"""SGLang's own client, `bench_serving.py` from the sglang 0.4.10 wheel, against `orch sim serve`:
throughput, TTFT, TPOT and ITL agree within 5% with `orch sim bench` on the same server and with
the simulator's model.

Needs what bench_serving.py imports (aiohttp, numpy, requests, tqdm, transformers; tokenizers
to build a local tokenizer, so nothing comes from a model hub) in the interpreter named by
$ORCH_TEST_SGLANG_PYTHON (default: this one), and `pip download` to reach the package index.
Skipped, saying which, when either is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from wordtokenizer import word_tokenizer

from orchestrator.sim import model as m

from .simhelpers import SPEC_FLAGS, TUNED, run_bench, sim_server, write_model

SGLANG = "sglang==0.4.10"
CLIENT_IMPORTS = ("aiohttp", "numpy", "requests", "tqdm", "transformers", "tokenizers")
ARGS = [
    "--dataset-name", "random-ids", "--random-input-len", "4096", "--random-output-len", "128",
    "--random-range-ratio", "1", "--num-prompts", "4", "--max-concurrency", "1",
]  # fmt: skip
COMPARED = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms")


def client_python() -> str:
    python = os.environ.get("ORCH_TEST_SGLANG_PYTHON", sys.executable)
    probe = subprocess.run(
        [python, "-c", f"import {', '.join(CLIENT_IMPORTS)}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(
            f"bench_serving.py's imports are missing in {python} ({last}); set "
            "ORCH_TEST_SGLANG_PYTHON to an interpreter with " + ", ".join(CLIENT_IMPORTS)
        )
    return python


def bench_serving(tmp: Path) -> Path:
    """sglang/bench_serving.py from the wheel, downloaded now."""
    wheels = tmp / "wheels"
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", SGLANG, "-d", str(wheels)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = sorted(wheels.glob("sglang-*.whl"))
    if got.returncode != 0 or not found:
        pytest.skip(f"`pip download {SGLANG}` failed: {got.stderr.strip()[-300:]}")
    with zipfile.ZipFile(found[0]) as wheel:
        wheel.extract("sglang/bench_serving.py", tmp / "client")
    return tmp / "client" / "sglang" / "bench_serving.py"


def test_sglang_s_own_client_agrees_with_sim_bench_and_the_model(tmp_path: Path) -> None:
    python = client_python()
    script = bench_serving(tmp_path)
    tokenizer = word_tokenizer(python, tmp_path / "tokenizer")
    repo = tmp_path / "repo"
    write_model(repo)
    flags = ["--tp", "8", "--disable-custom-all-reduce", "--noise", "0", *SPEC_FLAGS]
    # Time scale 1: a real client times the server in real seconds.
    rows: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    with sim_server(repo, flags, TUNED, time_scale=1.0) as srv:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        for backend in ("sglang", "sglang-oai"):
            real = subprocess.run(
                [python, str(script), "--backend", backend, "--base-url", srv.url, *ARGS,
                 "--model", "sim-model", "--tokenizer", str(tokenizer),
                 "--output-file", f"{backend}.jsonl", "--seed", "1"],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
            assert real.returncode == 0, real.stdout[-2000:] + real.stderr[-2000:]
            ours = run_bench(tmp_path / backend, srv.url, *ARGS, "--backend", backend)
            assert ours.returncode == 0, ours.stderr
            rows[backend] = (
                json.loads((tmp_path / f"{backend}.jsonl").read_text().splitlines()[-1]),
                json.loads((tmp_path / backend / "result.jsonl").read_text().splitlines()[-1]),
            )
    for backend, (theirs, mine) in rows.items():
        assert theirs["completed"] == mine["completed"] == 4
        assert theirs["total_output_tokens"] == mine["total_output_tokens"] == 4 * 128
        assert theirs["total_output_tokens_retokenized"] == 4 * 128
        for key in COMPARED:
            assert mine[key] == pytest.approx(theirs[key], rel=0.05), (backend, key)
    theirs = rows["sglang"][0]
    cfg = m.ServingConfig(
        tp=8,
        disable_custom_all_reduce=True,
        speculative_algorithm="EAGLE3",
        num_steps=2,
        num_draft_tokens=3,
    )
    expected = m.predict_output_throughput(m.model_params(), cfg, TUNED, 4096, 128)
    assert theirs["output_throughput"] == pytest.approx(expected, rel=0.05)
    # sglang: per token, as TPOT; sglang-oai: per chunk, and a chunk carries ~1.9 tokens.
    assert theirs["mean_itl_ms"] == pytest.approx(theirs["mean_tpot_ms"], rel=0.05)
    assert rows["sglang-oai"][0]["mean_itl_ms"] > 1.4 * theirs["mean_itl_ms"]
