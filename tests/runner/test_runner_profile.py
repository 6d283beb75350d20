"""Step 10, profile: the trace summary read on the host, and a profile the server cannot take
said in the cell, never a failed cell (a real runner against the test server, which has no
profiler endpoints)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from runner_helpers import cell_dir, free_port, load, make_cell, run_cell

from orchestrator.runner.profile import STEP_EVENT, summarize, trace_files


def _event(name: str, cat: str, dur_us: float) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": 0, "dur": dur_us, "pid": 0, "tid": 0}


def test_phases_and_kernel_families_per_decode_step(tmp_path: Path) -> None:
    events = []
    for _ in range(4):
        events += [
            _event(STEP_EVENT, "user_annotation", 30_000),
            _event("target verify forward", "gpu_user_annotation", 19_000),
            _event("all-reduce", "gpu_user_annotation", 1_000),
            _event("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel", 900),
            _event("sm90_xmma_gemm_bf16bf16_bf16f32", "kernel", 12_000),
            _event("flash_fwd_splitkv_kernel", "kernel", 4_000),
            _event("elementwise_kernel", "kernel", 500),
            _event("aten::mm", "cpu_op", 50_000),  # CPU time is not a phase
        ]
    events.append({"ph": "i", "name": "instant", "ts": 0})  # not a complete event: skipped
    path = tmp_path / "1.5-TP-0.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    got = summarize(str(path), steps_asked=20)
    assert got["steps"] == 4 and got["steps_from"] == "trace"
    assert got["phases_ms_per_step"] == {"target verify forward": 19.0, "all-reduce": 1.0}
    assert got["kernels_ms_per_step"] == {
        "communication": 0.9,
        "gemm": 12.0,
        "attention": 4.0,
        "other": 0.5,
    }


def test_without_step_events_the_steps_asked_divide(tmp_path: Path) -> None:
    path = tmp_path / "x.trace.json"
    path.write_text(json.dumps([_event("forward", "user_annotation", 10_000)]))
    got = summarize(str(path), steps_asked=5)
    assert got["steps_from"] == "asked" and got["phases_ms_per_step"] == {"forward": 2.0}


def test_trace_files_rank_zero_first(tmp_path: Path) -> None:
    for name in ("9-TP-1.trace.json.gz", "9-TP-0.trace.json.gz", "notes.txt", "9-TP-10.trace.json"):
        (tmp_path / name).write_text("{}")
    assert trace_files(str(tmp_path)) == [
        "9-TP-0.trace.json.gz",
        "9-TP-1.trace.json.gz",
        "9-TP-10.trace.json",
    ]


def test_a_profile_the_server_cannot_take_is_said_not_failed(home: Path) -> None:
    port = free_port()
    cell = make_cell(port, repeats=1)
    base = f"http://127.0.0.1:{port}"
    cell["profile"] = {"start_url": f"{base}/start_profile", "stop_url": f"{base}/stop_profile",
                       "num_steps": 5, "activities": ["CPU"], "wait": 1.0}  # fmt: skip
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    step = load(cell_dir(home) / "cell.json")["steps"]["profile"]
    assert step["status"] == "ok"
    assert step["detail"]["ok"] is False
    assert "start_profile: HTTP 404" in step["detail"]["error"]
    assert not (cell_dir(home) / "profile.json").exists()
