"""Issue 24, item 2: `orch audit --rerun` gives each rerun cell a stop against its recorded
repeats, read from the recorded repeats' files as the runner reads them; the id stays the
recorded one, and a cell the runner cannot judge between repeats runs every repeat."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from analyze_fixtures import base_cell, write_cell

from orchestrator.adapters.sglang_bench import RESULT_FILE
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.cell import Cell
from orchestrator.execute.audit.stopping import AuditStopPolicy, stop_line, with_audit_stop
from orchestrator.runner.repeat_rule import decide

THROUGHPUT = [84.1, 85.0, 84.6, 84.9, 84.4]


def _recorded(tmp: Path, values: list[float], **cell: Any) -> tuple[Cell, CellEvidence]:
    spec = {**base_cell("demo-1a2b3c4d"), **cell}
    spec["bench"] = {**spec["bench"], "repeats": 8}
    path = write_cell(tmp, cell=spec, repeats=[{"output_throughput": v} for v in values])
    for n, value in enumerate(values, start=1):
        repeat = path / "bench" / str(n)
        repeat.mkdir(parents=True, exist_ok=True)
        (repeat / RESULT_FILE).write_text(json.dumps({"output_throughput": value}) + "\n")
    (path / "bench" / "warmup-1").mkdir()  # a warmup is never a reference value
    return Cell.model_validate(spec), CellEvidence.load(path)


def test_the_rule_holds_the_recorded_repeats_and_the_id_stays(tmp_path: Path) -> None:
    cell, evidence = _recorded(tmp_path, THROUGHPUT)
    rerun = with_audit_stop(cell, evidence, tolerance=0.1)
    rule = rerun.bench.settle
    assert rerun.id == cell.id and rerun.bench.repeats == 8
    assert rule is not None and rule.against is not None and rule.min == 5
    assert rule.metrics == ("output_throughput",) and rule.chosen == "headline"
    assert rule.against.reference == {"output_throughput": tuple(THROUGHPUT)}
    assert rule.against.tolerance == 0.1
    # the runner gets it as JSON: the reference values survive the trip
    sent = json.loads(rerun.model_dump_json())["bench"]["settle"]["against"]
    assert sent["reference"]["output_throughput"] == THROUGHPUT


def test_a_cell_it_cannot_judge_between_repeats_runs_every_repeat(tmp_path: Path) -> None:
    # a generic bench with no regex metric: the runner reads nothing between repeats
    cell, evidence = _recorded(
        tmp_path / "generic", THROUGHPUT, bench={"adapter": "generic", "argv": ["true"]}
    )
    assert with_audit_stop(cell, evidence, tolerance=0.05) == cell
    # four recorded repeats are too few for the outlier screen: no stop, every repeat runs
    cell, evidence = _recorded(tmp_path / "four", THROUGHPUT[:4])
    assert with_audit_stop(cell, evidence, tolerance=0.05) == cell


def test_the_stop_is_said_in_one_line(tmp_path: Path) -> None:
    doc = {
        "min": 2,
        "max": 5,
        "ran": 2,
        "stopped": "decided",
        "metrics": {"output_throughput": {"n": 2, "verdict": "lower", "change": -0.31}},
    }
    (tmp_path / "repeats.json").write_text(json.dumps(doc))
    line = stop_line("demo-1a2b3c4d", tmp_path, 0.05)
    assert line == (
        "  demo-1a2b3c4d: rerun decided after 2 of 5 repeats: output_throughput lower than "
        "recorded (-31.0%) (sequential test, tolerance 5%)"
    )
    assert stop_line("none", tmp_path / "missing", 0.05) is None


def _wrong_calls(change: float, slow_share: float, trials: int = 600) -> float:
    """The share of reruns the stop calls wrongly: the record 10 clean repeats at 1 % noise,
    the rerun's repeats `slow_share` of them 15 % slow (a noisy host, no change in the cell)."""
    policy = AuditStopPolicy()
    truth = "same" if change == 0 else "higher" if change > 0 else "lower"
    wrong = 0
    for trial in range(trials):
        rng = random.Random(f"audit-stop-{change}-{slow_share}-{trial}")
        record = [100 * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(10)]
        rule = {
            "min": policy.min_repeats,
            "max": 10,
            "metrics": ["m"],
            "against": {
                "reference": {"m": record},
                "tolerance": 0.04,
                "error": policy.error,
                "noise_z": policy.noise_z,
            },
        }
        rerun: list[float] = []
        while True:
            value = 100 * (1 + change) * (1 + 0.01 * rng.gauss(0, 1))
            rerun.append(value * 0.85 if rng.random() < slow_share else value)
            stop, judged = decide({"m": rerun}, rule, len(rerun))
            if stop is not None:
                break
        call = judged["m"]["verdict"]
        wrong += call is not None and call != truth
    return wrong / trials


def test_slow_repeats_do_not_make_wrong_calls() -> None:
    """Issue 36 item 7: with 20 % of the rerun's repeats slow, looking from 2 repeats (before
    the outlier screen can work) called 9.6 % wrongly; 5 % is stated. Measured: <= 5 % plus two
    standard errors of 600 trials, no change and a change of the tolerance alike."""
    margin = 2 * (0.05 * 0.95 / 600) ** 0.5
    for change in (0.0, 0.04):
        assert _wrong_calls(change, 0.2) <= 0.05 + margin, change
