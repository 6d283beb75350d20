"""`orch audit --rerun` of a cell declared with `bench.starts: 3` on the simulator: the rerun
runs the same three server starts (its stop looks only once the last one ran), the stop is told
the record's measured start-to-start spread and says so, and the verdict counts starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from bundle_helpers import apply, orch, read_json, sim_playbook, write_yaml
from sim_helpers import free_port

pytestmark = [pytest.mark.slow]


def test_an_audit_rerun_keeps_the_starts_and_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "starts.yml"
    sim_playbook(path, name="starts", port=free_port(), repo=None, repeats=6, tp_size=1)
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    data["env"][0].update(
        {
            "ORCH_SIM_TIME_SCALE": "0.02",
            "ORCH_SIM_START_SD": "0.01",
            "ORCH_SIM_SEED": "7",
            "ORCH_SIM_STATE": str(tmp_path / "state.json"),
        }
    )
    data["server"]["args"]["startup-time"] = 0
    data["bench"].update({"warmup": 1, "starts": 3})
    home, results = tmp_path / "home", tmp_path / "results"
    run = apply(write_yaml(path, data), results, home=home)
    audited = orch("audit", str(run), "--no-drift", "--rerun", "--results", str(results), home=home)
    said = audited.stdout + audited.stderr
    assert "rerun stops, start-to-start spread:" in said, said
    assert "measured over the record's 3 server starts" in said and "the rerun runs 3" in said
    rerun = next(p for p in results.iterdir() if p != run and (p / "cells").is_dir())
    (cell,) = list((rerun / "cells").iterdir())
    exits = [read_json(cell / "bench" / str(n) / "exit.json") for n in range(1, 6)]
    # the stop's first look is at repeat 5, the last start's first: every start ran
    assert [e["server_start"] for e in exits] == [1, 1, 2, 2, 3]
    assert read_json(cell / "cell.json")["cell"]["bench"]["starts"] == 3
    # the reproduction verdict counts starts, not repeats
    assert "note: the server start is the unit of replication" in said
