"""`sim serve` against what real clients expect: bursts of connections, every output length
honoured (0 included), a start-up phase, and a time scale that any client can see."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from orchestrator.sim.nccl_names import NCCL_ENV_NAMES, nearest_nccl_name
from orchestrator.sim.worker import nccl_log_lines

from .simhelpers import TIME_SCALE, get, post, sim_server


def test_a_burst_of_300_connections_is_accepted_without_a_syn_retry(tmp_path: Path) -> None:
    with sim_server(tmp_path) as srv:
        count = 300
        barrier = threading.Barrier(count)
        waits: list[float] = []
        socks: list[socket.socket] = []
        lock = threading.Lock()

        def connect() -> None:
            sock = socket.socket()
            sock.settimeout(10)
            barrier.wait()
            start = time.monotonic()
            try:
                sock.connect(("127.0.0.1", srv.port))
                waited = time.monotonic() - start
            except OSError:
                waited = float("inf")
            with lock:
                waits.append(waited)
                socks.append(sock)

        threads = [threading.Thread(target=connect) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        for sock in socks:
            sock.close()
        # A dropped SYN is retried after 1 s; a listen backlog that holds the burst drops none.
        assert len(waits) == count
        assert max(waits) < 0.5, sorted(waits)[-5:]
        assert get(srv.url + "/health")[0] == 200


def _stream(body: bytes) -> list[str]:
    return [e[len("data: ") :] for e in body.decode().split("\n\n") if e]


def test_every_output_length_is_honoured_zero_included(tmp_path: Path) -> None:
    with sim_server(tmp_path) as srv:
        for n in (0, 1, 3):
            req = {"text": "a b c", "sampling_params": {"max_new_tokens": n}}
            status, body = post(srv.url + "/generate", req)
            assert status == 200
            done = json.loads(body)
            assert done["meta_info"]["completion_tokens"] == n
            assert len(done["text"].split()) == n
            status, body = post(srv.url + "/generate", {**req, "stream": True})
            events = _stream(body)
            assert events[-1] == "[DONE]"
            last = json.loads(events[-2])
            assert last["meta_info"]["completion_tokens"] == n
            assert last["meta_info"]["finish_reason"] == {"type": "length", "length": n}

            status, body = post(srv.url + "/v1/completions", {"prompt": "hi", "max_tokens": n})
            assert status == 200
            assert json.loads(body)["usage"]["completion_tokens"] == n
            status, body = post(
                srv.url + "/v1/completions", {"prompt": "hi", "max_tokens": n, "stream": True}
            )
            events = _stream(body)
            assert events[-1] == "[DONE]"
            text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
            assert len(text.split()) == n
            assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
        # Absent lengths take SGLang's defaults: 128 native, 16 OpenAI.
        _, body = post(srv.url + "/generate", {"text": "a"})
        assert json.loads(body)["meta_info"]["completion_tokens"] == 128
        _, body = post(srv.url + "/v1/completions", {"prompt": "a"})
        assert json.loads(body)["usage"]["completion_tokens"] == 16
        bad = {"text": "a", "sampling_params": {"max_new_tokens": -1}}
        assert post(srv.url + "/generate", bad)[0] == 400
        assert post(srv.url + "/v1/completions", {"prompt": "a", "max_tokens": "x"})[0] == 400


def test_start_up_time_is_modelled_and_serving_waits_for_it(tmp_path: Path) -> None:
    # 40 simulated seconds of start-up (the model says 2) take 2 s at time scale 0.05.
    with sim_server(tmp_path, ["--startup-time", "40"], wait=False, time_scale=0.05) as srv:
        statuses: list[int] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not statuses:
            try:
                req = {"text": "a", "sampling_params": {"max_new_tokens": 1}}
                statuses.append(post(srv.url + "/generate", req, timeout=5)[0])
            except OSError:
                time.sleep(0.05)  # not listening yet
        assert statuses == [503]
        assert get(srv.url + "/health_generate")[0] == 503
        srv.wait_ready()
        assert srv.info()["sim"]["startup_s"] == 40.0
        assert "Capture cuda graph end. Time elapsed: 16.00 s." in srv.text()
        req = {"text": "a", "sampling_params": {"max_new_tokens": 1}}
        assert post(srv.url + "/generate", req)[0] == 200


def test_the_time_scale_is_visible_to_any_client(tmp_path: Path) -> None:
    with sim_server(tmp_path) as srv:
        for path in ("/server_info", "/get_server_info"):
            status, body = get(srv.url + path)
            assert status == 200
            assert json.loads(body)["sim"]["time_scale"] == TIME_SCALE
        assert f"WARNING: sim: time scale {TIME_SCALE:g}:" in srv.text()
        assert "scaled, not simulated, numbers" in srv.text()


@pytest.mark.parametrize(
    ("name", "nearest"),
    [
        ("NCCL_MIN_NCHANNEL", "NCCL_MIN_NCHANNELS"),
        ("NCCL_ALOG", "NCCL_ALGO"),
        ("NCCL_CROSSNIC", "NCCL_CROSS_NIC"),
        ("NCCL_MIN_NCHANNELS", None),  # known: nothing to suggest
        ("NCCL_SOMETHING_ELSE_ENTIRELY", None),
    ],
)
def test_nearest_nccl_name(name: str, nearest: str | None) -> None:
    assert nearest_nccl_name(name) == nearest


def test_the_simulated_nccl_reports_only_names_nccl_knows() -> None:
    env = {"NCCL_DEBUG": "INFO", "NCCL_MIN_NCHANNELS": "32", "NCCL_MIN_NCHANNEL": "8"}
    lines = "\n".join(nccl_log_lines(env, 0, 2, 123, "2.27.5", "h"))
    assert "NCCL_MIN_NCHANNELS set by environment to 32." in lines
    assert "NCCL_MIN_NCHANNEL " not in lines
    assert {"NCCL_ALGO", "NCCL_PROTO", "NCCL_IB_HCA", "NCCL_DEBUG"} <= NCCL_ENV_NAMES
