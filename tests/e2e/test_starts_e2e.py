"""`bench.starts: N` end to end on the simulator: the server restarted between groups of
repeats (a session's next cell too), each repeat's start recorded, and the spread between
starts in metrics.json; the simulator's per-start speed factor is what it measures."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from bundle_helpers import apply, ok, orch, read_json, sim_playbook, write_yaml
from sim_helpers import free_port

pytestmark = [pytest.mark.slow]


def test_repeats_spread_over_server_starts(tmp_path: Path) -> None:
    path = tmp_path / "starts.yml"
    sim_playbook(path, name="starts", port=free_port(), repo=None, repeats=6, tp_size=1)
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    data["env"][0].update(
        {
            "ORCH_SIM_TIME_SCALE": "0.02",
            "ORCH_SIM_START_SD": "0.05",
            "ORCH_SIM_SEED": "5",
            "ORCH_SIM_STATE": str(tmp_path / "state.json"),
        }
    )
    data["server"]["args"]["startup-time"] = 0
    # a bench-only axis: both cells share one session, the second takes the restarted server
    data["matrix"] = {"prompts": [2, 3]}
    data["bench"].update({"warmup": 1, "starts": 3})
    data["bench"]["args"]["num-prompts"] = "{{ matrix.prompts }}"
    run = apply(write_yaml(path, data), tmp_path / "results", home=tmp_path / "home")
    cells = sorted((run / "cells").iterdir(), key=lambda p: read_json(p / "cell.json")["started"])
    assert len(cells) == 2
    seen_starts: list[int] = []
    for cell in cells:
        record = read_json(cell / "cell.json")
        assert record["status"] == "passed", record.get("reason")
        exits = [read_json(cell / "bench" / str(n) / "exit.json") for n in range(1, 7)]
        assert [e["server_start"] for e in exits] == [1, 1, 2, 2, 3, 3]
        # every start warmed up again
        assert {f"warmup-{i}" for i in (1, 2, 3)} <= {p.name for p in (cell / "bench").iterdir()}
        restarts = record["steps"]["bench"]["detail"]["server_starts"]
        assert [r["start"] for r in restarts] == [2, 3]
        metrics = read_json(cell / "metrics.json")
        assert metrics["starts"]["count"] == 3
        assert metrics["starts"]["of_repeat"] == {str(n): (n + 1) // 2 for n in range(1, 7)}
        spread = metrics["starts"]["metrics"]["output_throughput"]
        assert spread["starts"] == 3 and spread["between_start_sd"] is not None
        log = (cell / "server.log").read_text()
        seen_starts += [int(n) for n in re.findall(r"sim: server start (\d+) on this host", log)]
    # the first cell started the server once and restarted it twice; the follower twice more
    assert sorted(set(seen_starts)) == [1, 2, 3, 4, 5]

    # orch show, report and diff say the spread between starts (they count starts, not repeats)
    shown = ok(orch("show", str(cells[0]), home=tmp_path / "home"))
    line = r"starts +3 server starts: output_throughput start-to-start sd [\d.]+ %"
    assert re.search(line, shown)
    report = ok(orch("report", str(run), home=tmp_path / "home"))
    assert re.search(r"output_throughput: 3 server starts: start-to-start sd [\d.]+ %", report)
    diff = orch("diff", str(cells[0]), str(cells[1]), home=tmp_path / "home").stdout
    assert "the server start is the unit of replication" in diff
    assert "; 3 v 3 starts, n=6/6)" in diff
