"""The simulated server's profiler: SGLang's start/stop protocol and a trace the runner's
summary reads back as the model's phases per step."""

from __future__ import annotations

from pathlib import Path

from orchestrator.runner.profile import summarize, trace_files
from orchestrator.sim.profiler import Profiler

PHASES = {"draft steps": 0.8, "target verify forward": 19.0, "all-reduce": 0.8}


def test_num_steps_stops_by_itself_and_writes_rank_zeros_trace(tmp_path: Path) -> None:
    prof = Profiler()
    assert prof.start({"output_dir": str(tmp_path), "num_steps": 3}) == (200, "Start profiling.\n")
    assert prof.start({"output_dir": str(tmp_path)})[0] == 500  # already in progress
    for _ in range(3):
        assert prof.recording()
        prof.step(PHASES)
    assert not prof.recording()
    prof.step(PHASES)  # after the profile: not recorded
    (name,) = trace_files(str(tmp_path))
    assert name.endswith("-TP-0.trace.json.gz")
    got = summarize(str(tmp_path / name), steps_asked=99)
    assert got["steps"] == 3 and got["steps_from"] == "trace"
    assert got["phases_ms_per_step"] == PHASES
    # SGLang answers a stop with nothing in progress with an error (a 500)
    assert prof.stop()[0] == 500


def test_without_num_steps_stop_writes_the_trace(tmp_path: Path) -> None:
    prof = Profiler()
    prof.start({"output_dir": str(tmp_path / "out")})
    prof.step(PHASES)
    prof.step(PHASES)
    status, text = prof.stop()
    assert status == 200 and text.startswith("Stop profiling")
    (name,) = trace_files(str(tmp_path / "out"))
    assert summarize(str(tmp_path / "out" / name), steps_asked=1)["steps"] == 2
