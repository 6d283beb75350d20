"""`orch investigate --plan` on bundles whose env names are not variable names (issue 39 item
15): such a difference is listed, never made into an experiment's variable, and its name and
values stay on one terminal line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from cli_helpers import run_orch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyze"))
from analyze_fixtures import base_cell, write_run

INVENTORY = "all:\n  hosts:\n    gpu01:\n      ansible_host: 192.0.2.1\n"


def test_an_env_name_that_is_no_variable_name_is_not_testable(tmp_path: Path) -> None:
    def cell(cid: str, env: dict[str, str], values: list[float]) -> dict[str, Any]:
        data = base_cell(cid, version="a" * 40, env=env)
        return {"cell": data, "repeats": [{"output_throughput": v} for v in values]}

    odd = "LD_PRELOAD=/tmp/x.so; NCCL"
    run = write_run(tmp_path / "results", "20261205-000000-demo-aaaa", [
        cell("good-1a2b3c4d", {"NCCL_ALGO": "Ring"}, [94, 95, 93, 94]),
        cell("bad-5e6f7a8b", {"NCCL_ALGO": "PAT\nFAKE: done", odd: "1"}, [60, 61, 59, 60]),
    ])  # fmt: skip
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    good, bad = run / "cells" / "good-1a2b3c4d", run / "cells" / "bad-5e6f7a8b"
    done = run_orch(tmp_path, "investigate", str(good), str(bad), "-i", "hosts.yml", "--plan")
    assert done.returncode == 0, done.stderr
    (line,) = [s for s in done.stdout.splitlines() if "LD_PRELOAD" in s]
    assert "not testable" in line and "not an environment variable name" in line, line
    assert not any(s.startswith("FAKE") for s in done.stdout.splitlines()), done.stdout
    assert "env NCCL_ALGO: Ring (GOOD) vs PAT\\nFAKE: done (BAD), testable" in done.stdout
