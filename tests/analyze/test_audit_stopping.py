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
from orchestrator.analyze.replication import start_spread, starts_document
from orchestrator.cell import Cell
from orchestrator.execute.audit.stopping import (
    AuditStopPolicy,
    StartNoise,
    first_look,
    start_noise,
    start_noise_line,
    stop_line,
    stop_start_noise,
    with_audit_stop,
)
from orchestrator.runner.repeat_rule import decide
from orchestrator.runner.starts import runs_over_starts

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


# --- issue 36 item 2: the server start is the unit of replication ------------------------------


def _recorded_starts(tmp: Path, starts: int, values: list[float]) -> tuple[Cell, CellEvidence]:
    """A record of `values` over `starts` server starts, metrics.json's `starts` written as the
    runner writes it (`starts_document`)."""
    cell, evidence = _recorded(tmp, values)
    layout = [s for kind, _, s in runs_over_starts(0, len(values), starts) if kind == "measure"]
    metrics_path = evidence.path / "metrics.json"
    doc = json.loads(metrics_path.read_text())
    doc["starts"] = starts_document(doc["repeats"], dict(enumerate(layout, start=1)))
    metrics_path.write_text(json.dumps(doc))
    spec = cell.model_dump(mode="json")
    spec["bench"] = {**spec["bench"], "repeats": len(values), "starts": starts}
    return Cell.model_validate(spec), CellEvidence.load(evidence.path)


def test_a_record_of_several_starts_tells_the_stop_its_measured_spread(tmp_path: Path) -> None:
    rng = random.Random("audit-starts-record")
    offsets = [1.0, 1.03, 0.97]
    values = [100 * offsets[(i // 4)] * (1 + 0.005 * rng.gauss(0, 1)) for i in range(12)]
    cell, evidence = _recorded_starts(tmp_path, 3, values)
    rerun = with_audit_stop(cell, evidence, tolerance=0.05)
    rule = rerun.bench.settle
    assert rule is not None and rule.against is not None
    # the rerun keeps the record's starts and runs every one: the first look is at repeat 9
    assert rerun.bench.starts == 3 and rule.min == 9
    noise = start_noise(cell, evidence)
    assert noise.record_starts == 3 and noise.rerun_starts == 3
    assert noise.between_sd is not None and 0.02 < noise.between_sd < 0.04
    assert noise.sd > noise.between_sd  # taken at its upper bound: 2 degrees of freedom
    assert rule.against.start_noise == stop_start_noise(noise, 12, 9) > 0
    line = start_noise_line(cell, evidence)
    assert "measured over the record's 3 server starts" in line and "the rerun runs 3" in line
    # a record of one start: nothing measured, the stop assumes none and says so
    one_cell, one = _recorded(tmp_path / "one", THROUGHPUT + THROUGHPUT[:3])
    assert with_audit_stop(one_cell, one, tolerance=0.05).bench.settle.against.start_noise == 0  # type: ignore[union-attr]
    assert "one recorded server start: start-to-start spread not measured" in start_noise_line(
        one_cell, one
    )


def _wrong_calls_over_starts(
    change: float, start_sd: float, measured: bool, trials: int = 800
) -> float:
    """The share of reruns the stop calls wrongly: record and rerun 12 repeats over 3 server
    starts each (offset sd `start_sd`, 1 % noise within); `measured`: the stop as
    `with_audit_stop` now sets it (the record's measured spread, the first look at the last
    start), else as before (no start noise, the first look at repeat 5)."""
    policy = AuditStopPolicy()
    truth = "same" if change == 0 else "higher" if change > 0 else "lower"
    layout = [s for kind, _, s in runs_over_starts(0, 12, 3) if kind == "measure"]
    rng = random.Random(f"audit-starts-{change}-{start_sd}-{measured}")
    wrong = 0
    for _ in range(trials):
        a = {s: 1 + start_sd * rng.gauss(0, 1) for s in (1, 2, 3)}
        record = [100 * a[s] * (1 + 0.01 * rng.gauss(0, 1)) for s in layout]
        first, noise = policy.min_repeats, 0.0
        if measured:
            first = first_look(12, 3, policy.min_repeats)
            spread = start_spread(record, layout).between_sd
            noise = stop_start_noise(StartNoise(spread, 3, 3, noise_z=policy.noise_z), 12, first)
        rule = {
            "min": first,
            "max": 12,
            "metrics": ["m"],
            "against": {
                "reference": {"m": record},
                "tolerance": 0.04,
                "error": policy.error,
                "noise_z": policy.noise_z,
                "start_noise": noise,
            },
        }
        b = {s: 1 + start_sd * rng.gauss(0, 1) for s in (1, 2, 3)}
        rerun: list[float] = []
        for start in layout:
            rerun.append(100 * (1 + change) * b[start] * (1 + 0.01 * rng.gauss(0, 1)))
            stop, judged = decide({"m": rerun}, rule, len(rerun))
            if stop is not None:
                break
        call = judged["m"]["verdict"]
        wrong += call is not None and call != truth
    return wrong / trials


def test_the_stop_with_a_measured_start_spread_keeps_its_error_rate() -> None:
    """Start sd 2 %, 3 starts a side: the old stop (no start noise, a look from repeat 5 of
    the first starts) called 21 % of unchanged reruns changed and 11 % / 8 % of changes of the
    tolerance wrongly (800 trials each); told the record's measured spread at its upper bound,
    and looking only once every start ran: 1.8 %, 1.1 %, 0.6 %, within 5 % plus two standard
    errors for no change and a change of the tolerance alike."""
    margin = 2 * (0.05 * 0.95 / 800) ** 0.5
    assert _wrong_calls_over_starts(0.0, 0.02, measured=False) > 0.1
    for change in (0.0, 0.04, -0.04):
        assert _wrong_calls_over_starts(change, 0.02, measured=True) <= 0.05 + margin, change
