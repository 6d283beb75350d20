"""A seed the server drew itself is noise, not a cause (issue 11, item 16's no-change run).

SGLang draws `random_seed` at every start when none is given and reports it in `server_info`:
two runs of one playbook then differ in it by chance, and `orch diff` must not rank "server
flags" as the likely cause of a no-change run. A seed the playbook sets stays a cause.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyze_fixtures import base_cell, write_run

from orchestrator.analyze.diff.cells import diff_runs
from orchestrator.analyze.diff.model import CellDiff
from orchestrator.analyze.diff.render import render_diff
from orchestrator.analyze.evidence import load_run

REPORTED = "random_seed (reported by the server, server_info)"


def _run(tmp: Path, run_id: str, reported_seed: int, args: dict[str, Any] | None = None) -> Path:
    cell = base_cell("srv-1a2b3c4d", args=args)
    run = write_run(tmp, run_id, [{"cell": cell, "repeats": [{"output_throughput": 50.0}]}])
    captures = run / "cells" / cell["id"] / "captures"
    captures.mkdir()
    info = {"random_seed": reported_seed, "tp_size": 8, "version": "0.4.10"}
    (captures / "server_info.ready.json").write_text(json.dumps(info))
    return run


def _pair(a: Path, b: Path) -> tuple[CellDiff, str]:
    diff = diff_runs(load_run(a).cells, load_run(b).cells)
    return diff.pairs[0], render_diff(diff)


def test_a_seed_the_server_drew_is_noise(tmp_path: Path) -> None:
    pair, text = _pair(_run(tmp_path, "a", 46), _run(tmp_path, "b", 141))
    (entry,) = pair.section("server_flags").entries
    assert (entry.key, entry.a, entry.b) == (REPORTED, 46, 141)
    assert entry.within_tolerance and "not set in the playbook" in (entry.note or "")
    assert pair.differing == []
    assert "differences, most likely cause first" not in text
    assert "server flags" in text.split("no differences in any pair: ")[1]


def test_a_seed_the_playbook_sets_is_a_cause(tmp_path: Path) -> None:
    args = {"model-path": "/models/m", "tp-size": 8, "port": 30000}
    a = _run(tmp_path, "a", 1, {**args, "random-seed": 1})
    b = _run(tmp_path, "b", 2, {**args, "random-seed": 2})
    pair, text = _pair(a, b)
    entries = {e.key: e for e in pair.section("server_flags").entries}
    assert not entries["--random-seed"].within_tolerance
    assert not entries[REPORTED].within_tolerance
    assert [s.name for s in pair.differing] == ["server_flags"]
    assert "differences, most likely cause first:\n  server flags: 1 of 1 pairs" in text
