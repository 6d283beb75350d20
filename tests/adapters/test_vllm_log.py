"""vLLM log metrics per repeat: only stats intervals inside the repeat's window count.

The fixture is a vLLM 0.10.1 server log (EAGLE-3) in the host's local time, UTC+1: a warm-up
(10:05:00-10:05:25, cold, low acceptance), idle, repeat 1 (10:06:00.5-10:06:42.3) and repeat 2
(10:07:00.2-10:07:41.9), each with a ramp-up and a tail interval that straddle its window.
"""

from __future__ import annotations

import json
import shutil
import statistics
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.adapters.vllm_log import (
    Stamp,
    Window,
    parse_log,
    stamp_epoch,
    window_metrics,
)
from orchestrator.analyze.verdict import score_cell
from orchestrator.cell import Cell

from .cells import FIXTURES, make_cell

LOG = FIXTURES / "vllm" / "server.repeats.log"
PLUS_ONE = timezone(timedelta(hours=1))
# (name, local start, local end) on 2026-01-14, as the runner timed them
WINDOWS = [
    ("warmup-1", "10:05:00", "10:05:25"),
    ("1", "10:06:00.5", "10:06:42.3"),
    ("2", "10:07:00.2", "10:07:41.9"),
]


def _epoch(clock: str, zone: Any = PLUS_ONE, day: str = "2026-01-14") -> float:
    return datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=zone).timestamp()


def _cell(env: dict[str, str] | None = None) -> Cell:
    server = server_adapter("vllm").build({"args": {"model": "/models/Llama-3.1-8B-Instruct"}})
    bench = bench_adapter("vllm.bench_serve").build({"repeats": 2, "warmup": 1}, server)
    return make_cell(server=server, bench=bench, env=env)


def _cell_dir(
    tmp_path: Path, zone: Any = PLUS_ONE, offset: int | None = 3600, windows: Any = WINDOWS
) -> Path:
    """A cell directory as the runner leaves it; `offset` is what the runner recorded."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copy(LOG, tmp_path / "server.log")
    times = {"started": _epoch("10:02:10", zone), "finished": _epoch("10:08:15", zone)}
    (tmp_path / "cell.json").write_text(json.dumps({"status": "passed", **times}))
    for name, start, end in windows:
        rdir = tmp_path / "bench" / name
        rdir.mkdir(parents=True)
        shutil.copy(FIXTURES / "vllm" / "bench_serve.eagle3.json", rdir / "result.json")
        doc: dict[str, Any] = {"rc": 0, "start": _epoch(start, zone), "end": _epoch(end, zone)}
        if offset is not None:
            doc.update(utc_offset_s=offset, utc_offset_end_s=offset)
        (rdir / "exit.json").write_text(json.dumps(doc))
    return tmp_path


def _weighted(pairs: list[tuple[float, int]]) -> float:
    return sum(v * w for v, w in pairs) / sum(w for _, w in pairs)


REPEAT_1 = {
    "log_gen_throughput": 812.4,  # median of 812.4, 820.1, 805.7: not the ramp-up 95.3
    "log_accept_len": _weighted([(2.41, 3120), (2.47, 3150), (2.44, 3090)]),
    "log_draft_acceptance_rate": (1466 + 1544 + 1483) / (3120 + 3150 + 3090),
}
REPEAT_2 = {
    "log_gen_throughput": 795.0,
    "log_accept_len": _weighted([(2.38, 3060), (2.40, 3090), (2.42, 3060)]),
    "log_draft_acceptance_rate": (1408 + 1442 + 1448) / (3060 + 3090 + 3060),
}


def test_each_repeat_gets_the_log_lines_of_its_own_window(tmp_path: Path) -> None:
    cell_dir = _cell_dir(tmp_path)
    cell = _cell()
    adapter = bench_adapter("vllm.bench_serve")
    for name, expected in (("1", REPEAT_1), ("2", REPEAT_2)):
        result = adapter.parse_repeat_with_sources(cell_dir / "bench" / name, cell)
        got = {k: v for k, v in result.metrics.items() if k.startswith("log_")}
        assert got == pytest.approx(expected), name
        assert result.sources["log_accept_len"] == "server.log inside the repeat's window"
        assert result.metrics["output_throughput"] == pytest.approx(90.4983)  # the file's too
    # the whole life's median (warm-up, ramp-ups and tails included) is far from both
    whole = [i.gen_throughput for i in parse_log(LOG.read_text()).intervals if i.gen_throughput]
    assert statistics.median(whole) == 640.5
    # and the whole life's acceptance (cold warm-up included) is lower than either repeat's
    spec = server_adapter("vllm").analyze(cell_dir, cell)["facts"]["spec_decoding"]
    assert spec["mean_acceptance_length"]["mean"] < 2.3 < REPEAT_2["log_accept_len"]


def test_the_verdict_keeps_them_per_repeat_with_units(tmp_path: Path) -> None:
    cell_dir = _cell_dir(tmp_path)
    metrics = score_cell(cell_dir, _cell()).metrics
    repeats = {r["n"]: r for r in metrics["repeats"]}
    assert repeats[1]["log_gen_throughput"] == 812.4 and repeats[2]["log_gen_throughput"] == 795
    assert metrics["summary"]["log_gen_throughput"]["median"] == pytest.approx(803.7)
    assert metrics["units"]["log_accept_len"] == "tokens/step"
    # the server block: every interval inside some measured window (warm-up not measured)
    assert metrics["server"]["log_gen_throughput"] == pytest.approx((800 + 805.7) / 2)
    facts = metrics["server_facts"]
    assert facts["generation_throughput"] == {"lines": 13, "median": 640.5}
    assert [w["n"] for w in facts["log_windows"]] == [1, 2]
    assert facts["log_windows"][0]["clock"] == "the host's UTC offset, 3600s"
    assert facts["log_windows"][0]["start"] == "2026-01-14T09:06:00+00:00"
    # per repeat in the facts too, whatever the bench
    assert facts["log_windows"][1]["log_gen_throughput"] == 795.0
    assert facts["log_windows"][1]["intervals"] == 3


def test_the_cells_tz_decides_the_servers_clock(tmp_path: Path) -> None:
    """A server given TZ in the cell's env logs in that zone: the runner's offset is not it."""
    new_york = ZoneInfo("America/New_York")
    cell_dir = _cell_dir(tmp_path, zone=new_york, offset=None)
    cell = _cell(env={"TZ": "America/New_York"})
    result = bench_adapter("vllm.bench_serve").parse_repeat_with_sources(cell_dir / "bench/1", cell)
    assert result.metrics["log_gen_throughput"] == 812.4
    bad = _cell(env={"TZ": "Mars/Olympus_Mons"})
    result = bench_adapter("vllm.bench_serve").parse_repeat_with_sources(cell_dir / "bench/1", bad)
    assert not any(k.startswith("log_") for k in result.metrics)
    assert any("TZ='Mars/Olympus_Mons'" in n for n in result.notes), result.notes


def test_no_value_rather_than_a_wrong_one(tmp_path: Path) -> None:
    # a runner from before utc_offset_s: the lines cannot be placed
    old = _cell_dir(tmp_path / "old", offset=None)
    result = bench_adapter("vllm.bench_serve").parse_repeat_with_sources(old / "bench/1", _cell())
    assert not any(k.startswith("log_") for k in result.metrics)
    assert any("no utc_offset_s" in n for n in result.notes), result.notes
    assert score_cell(old, _cell()).metrics["server"] == {}
    # a repeat too short to hold one whole stats interval (10:06:03 -> 10:06:13 ends at :14)
    short = _cell_dir(tmp_path / "short", windows=[("1", "10:06:00.5", "10:06:13.5")])
    result = bench_adapter("vllm.bench_serve").parse_repeat_with_sources(short / "bench/1", _cell())
    assert not any(k.startswith("log_") for k in result.metrics)
    assert any("no whole vLLM stats interval" in n for n in result.notes), result.notes
    # the server's clock in another zone than the runner's (here a minute off: the windows
    # would fall on the next repeat's lines and give repeat 1 repeat 2's numbers)
    skew = _cell_dir(tmp_path / "skew", offset=3660)
    result = bench_adapter("vllm.bench_serve").parse_repeat_with_sources(skew / "bench/1", _cell())
    assert not any(k.startswith("log_") for k in result.metrics)
    (note,) = [n for n in result.notes if "clock" in n]
    assert "outside the cell's 2026-01-14T09:02:10+00:00 to 2026-01-14T09:08:15" in note, note
    assert "set TZ in the cell's env" in note
    assert score_cell(skew, _cell()).metrics["server"] == {}
    unchecked = Window(
        _epoch("10:06:00.5"), _epoch("10:06:42.3"), timezone(timedelta(seconds=3660))
    )
    assert (
        window_metrics(parse_log(LOG.read_text()).intervals, unchecked)[0]["log_gen_throughput"]
        == 795.0
    )  # what the check keeps out
    # no cell.json times: the clock cannot be checked
    (skew / "cell.json").write_text(json.dumps({"status": "passed"}))
    result = bench_adapter("vllm.bench_serve").parse_repeat_with_sources(skew / "bench/1", _cell())
    assert any("cell.json records no start and finish" in n for n in result.notes)


def test_a_session_cells_own_part_of_the_log_is_checked(tmp_path: Path) -> None:
    """A cell sharing a session's server: its server.log is the start-up part (from before the
    cell started), the runner's marker, then the cell's own part."""
    cell_dir = _cell_dir(tmp_path)
    lines = LOG.read_text().splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if "10:05:33" in ln) + 1
    marker = "[orch] start-up above (server started by cell a-1); this cell's part below\n"
    (cell_dir / "server.log").write_text("".join([*lines[:12], marker, *lines[cut:]]))
    times = {"started": _epoch("10:05:50"), "finished": _epoch("10:08:15")}
    (cell_dir / "cell.json").write_text(json.dumps({"status": "passed", **times}))
    result = bench_adapter("vllm.bench_serve").parse_repeat_with_sources(
        cell_dir / "bench/1", _cell()
    )
    assert result.metrics["log_gen_throughput"] == 812.4, result.notes


def test_the_year_is_the_one_nearest_the_window() -> None:
    new_year = Window(_epoch("00:00:05", UTC, "2026-01-01"), 0.0, UTC)
    eve = stamp_epoch(Stamp(12, 31, 23 * 3600 + 59 * 60 + 58, 1.0), new_year)
    assert eve == _epoch("23:59:58", UTC, "2025-12-31")
    assert stamp_epoch(Stamp(1, 1, 3, 1.0), new_year) == _epoch("00:00:03", UTC, "2026-01-01")


def test_engines_are_summed_and_milliseconds_read() -> None:
    """Data-parallel engines log one line each per tick: the server's rate is their sum."""
    text = "\n".join(
        f"(APIServer pid=7) INFO 03-02 08:00:{s:02d}.{ms:03d} [loggers.py:123] Engine 00{e}: "
        f"Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: {gen} tokens/s, "
        "Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%"
        for s, ms, e, gen in [
            (0, 100, 0, 50.0), (0, 120, 1, 60.0),
            (10, 100, 0, 400.0), (10, 120, 1, 300.0),
            (20, 100, 0, 410.0), (20, 120, 1, 310.0),
        ]
    )  # fmt: skip
    intervals = parse_log(text).intervals
    assert intervals[2].stamp == Stamp(3, 2, 8 * 3600 + 10.1, 0.001)
    window = Window(_epoch("08:00:00.05", UTC, "2026-03-02"), 0.0, UTC)
    window = Window(window.start, window.start + 20.1, UTC)
    metrics, detail = window_metrics(intervals, window)
    assert detail == {"intervals": 4, "engines": 2, "spec_lines": 0}
    assert metrics == {"log_gen_throughput": pytest.approx(405.0 + 305.0)}


def test_the_catalogue_says_per_repeat_and_from_the_log() -> None:
    infos = {i.name: i for i in bench_adapter("vllm.bench_serve").catalogue()}
    for name in ("log_gen_throughput", "log_accept_len", "log_draft_acceptance_rate"):
        assert infos[name].source.startswith("server.log inside the repeat's window"), name
    assert bench_adapter("vllm.bench_serve").knows("log_accept_len")  # expect: may bound it
