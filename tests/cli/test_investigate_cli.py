"""`orch investigate`'s refusals and its plan, on written bundles: nothing runs, nothing is
written, one message with what to do."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cli_helpers import run_orch

from orchestrator.analyze.replication import starts_document

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyze"))
from analyze_fixtures import base_cell, write_run

INVENTORY = "all:\n  hosts:\n    gpu01:\n      ansible_host: 192.0.2.1\n"


def _pair(tmp_path: Path, good: list[float], bad: list[float]) -> tuple[str, str]:
    def cell(cid: str, version: str, algo: str, values: list[float]) -> dict[str, Any]:
        data = base_cell(cid, version=version, env={"NCCL_ALGO": algo})
        return {"cell": data, "repeats": [{"output_throughput": v} for v in values]}

    run = write_run(tmp_path / "results", "20261205-000000-demo-aaaa", [
        cell("good-1a2b3c4d", "a" * 40, "Ring", good),
        cell("bad-5e6f7a8b", "b" * 40, "PAT", bad),
    ])  # fmt: skip
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    return str(run / "cells" / "good-1a2b3c4d"), str(run / "cells" / "bad-5e6f7a8b")


def _runs(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "results").iterdir()}


def test_plan_lists_factors_and_runs_nothing(tmp_path: Path) -> None:
    good, bad = _pair(tmp_path, [94, 95, 93, 94], [60, 61, 59, 60])
    before = _runs(tmp_path)
    done = run_orch(tmp_path, "investigate", good, bad, "-i", "hosts.yml", "--plan")
    assert done.returncode == 0, done.stderr
    assert "commit: aaaaaaaaaaaa (GOOD) vs bbbbbbbbbbbb (BAD), testable" in done.stdout
    assert "env NCCL_ALGO: Ring (GOOD) vs PAT (BAD), testable" in done.stdout
    # 2 + 2 factors, each looked at twice (+ BAD now again), + together + a confirmed bisect's
    # 20 (ends 2 x 2, 4 halvings, 2 blocks of P F F P and the ends again, 2 probes)
    assert "budget: 28 cells at most" in done.stdout
    assert "Holm over 3 test(s)" in done.stdout
    assert _runs(tmp_path) == before


def _record_starts(cell_dir: Path, start_of: dict[int, int]) -> None:
    """metrics.json's `starts` record, as a cell run with `bench.starts` writes it."""
    path = cell_dir / "metrics.json"
    metrics = json.loads(path.read_text())
    repeats = [{"n": i, **r} for i, r in enumerate(metrics["repeats"], 1)]
    metrics["starts"] = starts_document(repeats, start_of)
    path.write_text(json.dumps(metrics))


def test_the_plan_says_the_unit_of_replication_and_its_cost(tmp_path: Path) -> None:
    good, bad = _pair(tmp_path, [94, 95, 93, 94], [60, 61, 59, 60])

    def plan(*args: str) -> str:
        done = run_orch(tmp_path, "investigate", good, bad, "-i", "hosts.yml", "--plan", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # nothing known: measured, 3 starts a cell, 2 extra starts for each of the 28 cells
    said = plan()
    assert "spreads its repeats over 3 server starts" in said
    assert "up to 56 extra starts over 28 cells" in said
    assert "the between-start spread is measured" in said
    said = plan("--starts", "1")
    assert "between-start spread not measured; verdicts assume it small" in said
    said = plan("--start-sd", "2%")
    assert "a between-start sd of 2.0% (--start-sd) is added to each side" in said
    assert "extra starts" not in said
    _record_starts(Path(bad), {1: 1, 2: 1, 3: 2, 4: 2})
    said = plan()  # a record of 2 starts: too few to take its spread as known, so measured
    assert "recorded by BAD (2 starts) rests on too few starts" in said
    assert "up to 56 extra starts over 28 cells" in said


def test_bundles_from_another_machine_need_a_yes(tmp_path: Path) -> None:
    good, bad = _pair(tmp_path, [94, 95, 93, 94], [60, 61, 59, 60])
    before = _runs(tmp_path)
    done = run_orch(tmp_path, "investigate", good, bad, "-i", "hosts.yml")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "made on another machine" in done.stderr and "--yes" in done.stderr
    assert "Traceback" not in done.stderr
    assert _runs(tmp_path) == before


def test_one_repeat_has_no_noise_to_judge_by(tmp_path: Path) -> None:
    good, bad = _pair(tmp_path, [94], [60, 61, 59])
    done = run_orch(tmp_path, "investigate", good, bad, "-i", "hosts.yml", "--plan")
    assert done.returncode == 2
    assert "GOOD has 1 value(s) of output_throughput" in done.stderr


def test_a_change_within_the_noise_is_said_and_nothing_runs(tmp_path: Path) -> None:
    good, bad = _pair(tmp_path, [94, 95, 93, 94, 96], [93, 95, 94, 92, 95])
    before = _runs(tmp_path)
    done = run_orch(tmp_path, "investigate", good, bad, "-i", "hosts.yml", "--yes")
    assert done.returncode == 0, done.stderr
    assert "not significant" in done.stdout and "nothing to explain" in done.stdout
    assert _runs(tmp_path) == before
