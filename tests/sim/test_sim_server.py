"""`sim serve` end to end: real processes, real HTTP on loopback, a small time scale."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.sim.state import write_host_state

from .simhelpers import (
    SPEC_FLAGS,
    TUNED,
    alive,
    children,
    environ,
    get,
    post,
    sim_server,
    write_model,
)


def test_health_generate_is_503_until_ready(tmp_path: Path) -> None:
    # A long (simulated) weight load so the 503 window is easy to see.
    write_model(tmp_path, startup_s=30.0)
    with sim_server(tmp_path, ["--tp-size", "2"], wait=False) as srv:
        statuses = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and 200 not in statuses:
            with contextlib.suppress(OSError):  # not listening yet
                statuses.append(get(srv.url + "/health_generate", timeout=5)[0])
            time.sleep(0.05)
        assert statuses[0] == 503
        assert statuses[-1] == 200
        assert get(srv.url + "/health")[0] == 200
        assert get(srv.url + "/ping")[0] == 200
        log = srv.text()
        assert "The server is fired up and ready to roll!" in log
        assert log.index("Load weight end") < log.index("ready to roll")


def test_workers_are_children_that_carry_the_env_and_log_nccl(tmp_path: Path) -> None:
    state = write_host_state(tmp_path / "state.json", nccl_version="2.21.5+cuda12.4")
    # NCCL_MIN_NCHANNEL (no S) is a misspelling real NCCL ignores: its log never names it.
    env = {"NCCL_DEBUG": "INFO", **TUNED, "NCCL_MIN_NCHANNEL": "8", "ORCH_SIM_STATE": str(state)}
    with sim_server(tmp_path / "repo", ["--tp", "4", "--disable-custom-all-reduce"], env) as srv:
        pids = srv.info()["sim"]["worker_pids"]
        assert len(pids) == 4
        assert sorted(pids) == children(srv.proc.pid)
        for pid in pids:
            seen = environ(pid)
            for name, value in TUNED.items():
                assert seen[name] == value
        log = srv.text()
        for pid in pids:
            assert re.search(rf":{pid}:\d+ \[\d\] NCCL INFO NCCL version 2\.21\.5\+cuda12\.4", log)
            assert f":{pid}:{pid} " in log
        assert log.count("NCCL INFO NCCL_ALGO set by environment to Ring\n") == 4
        assert log.count("NCCL INFO NCCL_MIN_NCHANNELS set by environment to 32.\n") == 4
        assert "NCCL_DEBUG set by" not in log
        assert "NCCL_MIN_NCHANNEL set" not in log
    # SIGTERM (by the context manager) stopped the server cleanly and its workers with it.
    assert srv.proc.returncode == 0
    assert not any(alive(pid) for pid in pids)


def test_no_nccl_lines_without_nccl_debug(tmp_path: Path) -> None:
    with sim_server(tmp_path, ["--tp", "2"], {"NCCL_ALGO": "Ring"}) as srv:
        assert "NCCL INFO" not in srv.text()


def test_a_commit_that_drops_nccl_algo_changes_workers_and_speed(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    # A slow interconnect makes NCCL's settings weigh enough to see through scheduling jitter.
    write_model(good, allreduce={"nccl_default_ms": 10.0})
    write_model(
        bad,
        allreduce={"nccl_default_ms": 10.0},
        bugs={"drop_env": ["NCCL_ALGO"], "drop_env_ranks": [1]},
    )
    flags = ["--tp", "8", "--disable-custom-all-reduce", "--noise", "0"]
    env = {"NCCL_DEBUG": "INFO", **TUNED}
    results = {}
    for name, repo in (("good", good), ("bad", bad)):
        with sim_server(repo, flags, env) as srv:
            pids = srv.info()["sim"]["worker_pids"]
            missing = [p for p in pids if "NCCL_ALGO" not in environ(p)]
            start = time.monotonic()
            status, body = post(
                srv.url + "/generate",
                {"text": "x " * 64, "sampling_params": {"max_new_tokens": 300}},
            )
            elapsed = time.monotonic() - start
            assert status == 200
            assert json.loads(body)["meta_info"]["completion_tokens"] == 300
            results[name] = (missing, srv.info()["sim"]["expected_decode_tok_s"], elapsed)
            algo_lines = srv.text().count("NCCL_ALGO set by environment to Ring")
            assert algo_lines == (8 if name == "good" else 7)
    assert results["good"][0] == []
    assert len(results["bad"][0]) == 1  # rank 1 only
    assert results["good"][1] == pytest.approx(1000 / (10.436 + 10 * 0.62 * 0.8 * 0.92), rel=1e-3)
    assert results["bad"][1] == pytest.approx(1000 / (10.436 + 10 * 0.8 * 0.92), rel=1e-3)
    # The tokens really come slower (the model says 19%).
    assert results["bad"][2] > results["good"][2] * 1.08


def test_http_api(tmp_path: Path) -> None:
    with sim_server(tmp_path, ["--tp", "2", "--model-path", "/m/kimi", *SPEC_FLAGS]) as srv:
        info = srv.info()
        assert info["tp_size"] == 2
        assert info["speculative_num_steps"] == 2
        assert info["internal_states"][0]["memory_usage"]["token_capacity"] > 0
        models = json.loads(get(srv.url + "/v1/models")[1])
        assert models["data"][0]["id"] == "/m/kimi"
        # Streaming /generate: cumulative text, growing completion_tokens, then [DONE].
        req = {"text": "a b c d", "sampling_params": {"max_new_tokens": 40}, "stream": True}
        status, body = post(srv.url + "/generate", req)
        events = [e[len("data: ") :] for e in body.decode().split("\n\n") if e]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        counts = [c["meta_info"]["completion_tokens"] for c in chunks]
        assert counts == sorted(counts) and counts[-1] == 40
        assert len(chunks[-1]["text"].split()) == 40
        assert chunks[0]["meta_info"]["prompt_tokens"] == 4
        # With EAGLE-3 most steps emit more than one token.
        assert len(chunks) < 35
        accept = srv.info()["internal_states"][0]["avg_spec_accept_length"]
        assert 1.4 < accept < 2.6
        # /v1/completions, streaming and not.
        status, body = post(srv.url + "/v1/completions", {"prompt": "hi", "max_tokens": 5})
        assert status == 200
        done = json.loads(body)
        assert done["usage"]["completion_tokens"] == 5
        assert len(done["choices"][0]["text"].split()) == 5
        _, body = post(
            srv.url + "/v1/completions", {"prompt": "hi", "max_tokens": 6, "stream": True}
        )
        parts = [e[6:] for e in body.decode().split("\n\n") if e]
        assert parts[-1] == "[DONE]"
        text = "".join(json.loads(p)["choices"][0]["text"] for p in parts[:-1])
        assert len(text.split()) == 6
        assert post(srv.url + "/flush_cache", {})[0] == 200
        assert get(srv.url + "/get_server_info")[0] == 200
        assert "deprecated" in srv.text()


def test_unknown_flags_are_tolerated_and_too_many_gpus_fail(tmp_path: Path) -> None:
    with sim_server(
        tmp_path, ["--tp", "1", "--enable-torch-compile", "--cuda-graph-max-bs", "8"]
    ) as srv:
        assert "ignoring arguments the simulator does not model: --enable-torch-compile" in (
            srv.text()
        )
    state = write_host_state(tmp_path / "state.json", gpu_count=4)
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.sim", "serve", "--tp-size", "8", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "ORCH_SIM_STATE": str(state)},
        cwd=tmp_path,
    )
    assert out.returncode == 1
    assert "invalid device ordinal" in out.stderr


def test_throttled_clock_is_slower(tmp_path: Path) -> None:
    state = write_host_state(tmp_path / "state.json", sm_clock=990)
    with sim_server(tmp_path, ["--tp", "8"], {"ORCH_SIM_STATE": str(state)}) as srv:
        sim = srv.info()["sim"]
        assert sim["clock_factor"] == pytest.approx(0.5)
        assert sim["expected_decode_tok_s"] < 50


def test_workers_exit_when_the_server_is_killed(tmp_path: Path) -> None:
    with sim_server(tmp_path, ["--tp", "3"]) as srv:
        pids = srv.info()["sim"]["worker_pids"]
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
        assert not any(alive(p) for p in pids)
