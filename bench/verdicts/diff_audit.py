"""`orch diff`, `orch audit --rerun`'s stop and `repeats: {until}`, measured: each verdict's
error rate on seeded simulations that call orch's own functions, against the rate it states.

    .venv/bin/python bench/verdicts/diff_audit.py [--quick] [--seed N]

diff: two cells of n repeats a side (n = 2..8), 18 metrics (1 deciding, 17 others), judged by
`analyze.diff.model.metric_deltas` (the exact rank test, Holm within each family) with the
ratio threshold off, so the test alone decides (orch diff's 5 % threshold only lowers the false
positives further). Under no change, measured_rate is the share of diffs with any metric called
changed in the family (the family-wise false-positive rate, stated 5 %); a +30 % shift of
every metric gives the power. A repeat has 2 % noise inside its start; each side is one start,
offset by a seeded start sd (0, 1, 2 %): a diff of two starts cannot tell a start's offset from
a change (the start is the unit of replication; see the condition's text). A run diff of 10
cells corrects across them (`correct`): its row is the run's family-wise rate.

diff with starts: two cells of 3 server starts x 4 repeats a side, each start offset by the
start sd (shared by its metrics), judged on start means (Welch's t, the start as the unit) in
the same families; the same cells without their `starts` record are what the repeat-level rank
test (the old diff) made of them. Power: every metric +10 %.

audit: the record is 10 repeats of one start; the rerun, another start, stops by the runner's
rule (`runner.repeat_rule.decide` with `execute.audit.stopping.AuditStopPolicy`). Truth: no
change ("same") or a change of the tolerance (4 %); measured_rate is the share of reruns the
stop calls wrongly (a side for no change, "same" or the other side for a change), stated 5 %.
Conditions: 1 % repeat noise; 0 or 20 % of repeats 15 % slow (both sides); start sd 0, 1, 2 %,
the stop told the start sd or not.

audit with starts: record and rerun 12 repeats over 3 server starts each, the stop as
`with_audit_stop` sets it (the record's measured start-to-start sd at its upper bound,
`stop_start_noise`; the first look at the last start, `first_look`), against the stop told
nothing of the starts and looking from repeat 5 (before); start sd 0, 1, 2 %.

repeats until: `decide` with {min 3, max 12, until 2 %, confidence 90 %} on normal, skewed,
bimodal and autocorrelated repeats; measured_rate is the share of settled cells whose recorded
interval holds the true median (stated 90 %), the settled share in the condition's text.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrator.analyze.diff.model import MetricDelta, correct, metric_deltas  # noqa: E402
from orchestrator.analyze.evidence import CellEvidence  # noqa: E402
from orchestrator.analyze.replication import start_spread  # noqa: E402
from orchestrator.execute.audit.stopping import (  # noqa: E402
    AuditStopPolicy,
    StartNoise,
    first_look,
    stop_start_noise,
)
from orchestrator.runner.repeat_rule import decide  # noqa: E402
from orchestrator.runner.starts import runs_over_starts  # noqa: E402

ALPHA = 0.05
METRICS = ["output_throughput", *(f"metric_{i:02d}" for i in range(17))]
REPEAT_NOISE = 0.02
AUDIT_TOLERANCE = 0.04
Row = dict[str, object]


def _cell(values: dict[str, list[float]]) -> CellEvidence:
    """A cell with these repeats; its headline throughput decides."""
    n = len(next(iter(values.values())))
    repeats = [{"n": i + 1, **{m: v[i] for m, v in values.items()}} for i in range(n)]
    return CellEvidence.of_metrics({"repeats": repeats})


def _side(rng: random.Random, n: int, shift: float, start_sd: float) -> CellEvidence:
    """One start's n repeats of every metric: 100 x (1 + shift) x start offset x repeat noise."""
    offset = 1.0 + start_sd * rng.gauss(0.0, 1.0)
    return _cell(
        {
            m: [
                100.0 * (1 + shift) * offset * (1 + REPEAT_NOISE * rng.gauss(0, 1))
                for _ in range(n)
            ]
            for m in METRICS
        }
    )


def _pair(rng: random.Random, n: int, shift: float, start_sd: float) -> list[MetricDelta]:
    a, b = _side(rng, n, 0.0, start_sd), _side(rng, n, shift, start_sd)
    return metric_deltas(a, b, ["output_throughput"], ratio_threshold=0.0, alpha=ALPHA)


def diff_rows(seed: int, trials: int) -> list[Row]:
    """Family-wise false positives at n = 2..8 a side (and with start sd), power at +30 %."""
    rows: list[Row] = []
    for n in range(2, 9):
        for start_sd in (0.0, 0.01, 0.02):
            started = time.monotonic()
            rng = random.Random(f"diff-{seed}-{n}-{start_sd}")
            any_deciding = any_other = 0
            for _ in range(trials):
                deltas = _pair(rng, n, 0.0, start_sd)
                any_deciding += any(m.significant for m in deltas if m.decides)
                any_other += any(m.significant for m in deltas if not m.decides)
            seconds = round(time.monotonic() - started, 2)
            for family, hits in (("deciding (1)", any_deciding), ("others (17)", any_other)):
                rows.append(
                    _row(
                        "diff: a change called where there is none (family-wise)",
                        f"{n} v {n}, {family}, start sd {start_sd:.0%}",
                        trials,
                        ALPHA,
                        hits / trials,
                        seconds,
                    )
                )
        started = time.monotonic()
        rng = random.Random(f"diff-power-{seed}-{n}")
        called = {True: 0, False: 0}
        for _ in range(trials):
            for m in _pair(rng, n, 0.30, 0.0):
                called[m.decides] += bool(m.significant)
        seconds = round(time.monotonic() - started, 2)
        for decides, size in ((True, 1), (False, len(METRICS) - 1)):
            least = next(m for m in _pair(rng, n, 0.0, 0.0) if m.decides is decides).cannot_reach
            rows.append(
                _row(
                    "diff: power, every metric +30 % (share of metrics called)",
                    f"{n} v {n}, {'deciding (1)' if decides else 'others (17)'}, start sd 0 %"
                    + (f" ({least})" if least else ""),
                    trials,
                    None,
                    called[decides] / (trials * size),
                    seconds,
                )
            )
    for start_sd in (0.0, 0.01, 0.02):
        started = time.monotonic()
        rng = random.Random(f"run-diff-{seed}-{start_sd}")
        hits = 0
        for _ in range(max(trials // 4, 50)):
            run = [m for _ in range(10) for m in _pair(rng, 6, 0.0, start_sd)]
            correct(run, ALPHA)
            hits += any(m.significant for m in run if m.decides)
        count = max(trials // 4, 50)
        rows.append(
            _row(
                "diff: a run diff calls a change where there is none (across cells)",
                f"10 cells, 6 v 6, deciding family of 10, start sd {start_sd:.0%}",
                count,
                ALPHA,
                hits / count,
                round(time.monotonic() - started, 2),
            )
        )
    return rows


def _starts_side(
    rng: random.Random, starts: int, per_start: int, shift: float, start_sd: float, record: bool
) -> CellEvidence:
    """`starts` server starts of `per_start` repeats of every metric, each start offset by
    `start_sd`; `record`: metrics.json's `starts` record (else read as repeats of one start)."""
    values: dict[str, list[float]] = {m: [] for m in METRICS}
    of_repeat: dict[str, int] = {}
    for start in range(1, starts + 1):
        offset = 1.0 + start_sd * rng.gauss(0.0, 1.0)
        for _ in range(per_start):
            of_repeat[str(len(of_repeat) + 1)] = start
            for m in METRICS:
                values[m].append(
                    100.0 * (1 + shift) * offset * (1 + REPEAT_NOISE * rng.gauss(0, 1))
                )
    cell = _cell(values)
    if record:
        cell.metrics["starts"] = {"count": starts, "of_repeat": of_repeat, "metrics": {}}
    return cell


def diff_starts_rows(seed: int, trials: int) -> list[Row]:
    """Family-wise false positives of 3 v 3 starts x 4 repeats, judged on start means (now)
    and as repeats of one start (before), at start sd 0, 1, 2 %; power at +10 %."""
    rows: list[Row] = []
    for record in (True, False):
        unit = "start means (Welch)" if record else "repeats, as before (rank test)"
        for start_sd in (0.0, 0.01, 0.02):
            started = time.monotonic()
            rng = random.Random(f"diff-starts-{seed}-{start_sd}-{record}")
            hits = {True: 0, False: 0}
            for _ in range(trials):
                a = _starts_side(rng, 3, 4, 0.0, start_sd, record)
                b = _starts_side(rng, 3, 4, 0.0, start_sd, record)
                deltas = metric_deltas(
                    a, b, ["output_throughput"], ratio_threshold=0.0, alpha=ALPHA
                )
                for decides in (True, False):
                    hits[decides] += any(m.significant for m in deltas if m.decides is decides)
            seconds = round(time.monotonic() - started, 2)
            for decides, family in ((True, "deciding (1)"), (False, "others (17)")):
                rows.append(
                    _row(
                        "diff with starts: a change called where there is none (family-wise)",
                        f"3 v 3 starts x 4 repeats, {family}, start sd {start_sd:.0%}, on {unit}",
                        trials,
                        ALPHA,
                        hits[decides] / trials,
                        seconds,
                    )
                )
    started = time.monotonic()
    rng = random.Random(f"diff-starts-power-{seed}")
    found = 0
    for _ in range(trials):
        a = _starts_side(rng, 3, 4, 0.0, 0.02, True)
        b = _starts_side(rng, 3, 4, 0.10, 0.02, True)
        deltas = metric_deltas(a, b, ["output_throughput"], ratio_threshold=0.0, alpha=ALPHA)
        found += bool(deltas[0].significant)
    rows.append(
        _row(
            "diff with starts: power, every metric +10 % (deciding metric called)",
            "3 v 3 starts x 4 repeats, start sd 2 %, on start means (Welch)",
            trials,
            None,
            found / trials,
            round(time.monotonic() - started, 2),
        )
    )
    return rows


def audit_starts_rows(seed: int, trials: int) -> list[Row]:
    """The stop's wrong calls when record and rerun ran 3 starts each: told the record's
    measured start spread (now) or nothing (before)."""
    policy = AuditStopPolicy()
    layout = [s for kind, _, s in runs_over_starts(0, 12, 3) if kind == "measure"]
    rows: list[Row] = []
    for start_sd in (0.0, 0.01, 0.02):
        for measured in (True, False):
            started = time.monotonic()
            worst = 0.0
            decided = runs = 0
            for change in (0.0, AUDIT_TOLERANCE, -AUDIT_TOLERANCE):
                truth = "same" if change == 0 else "higher" if change > 0 else "lower"
                rng = random.Random(f"audit-starts-{seed}-{start_sd}-{measured}-{change}")
                wrong = 0
                for _ in range(trials):
                    a = {s: 1 + start_sd * rng.gauss(0, 1) for s in (1, 2, 3)}
                    b = {s: 1 + start_sd * rng.gauss(0, 1) for s in (1, 2, 3)}
                    record = [_audit_draw(rng, 100.0, a[s], 0.0) for s in layout]
                    first, noise = policy.min_repeats, 0.0
                    if measured:
                        first = first_look(12, 3, policy.min_repeats)
                        told = StartNoise(
                            start_spread(record, layout).between_sd, 3, 3, noise_z=policy.noise_z
                        )
                        noise = stop_start_noise(told, 12, first)
                    rule = {
                        "min": first,
                        "max": 12,
                        "metrics": ["m"],
                        "against": {
                            "reference": {"m": record},
                            "tolerance": AUDIT_TOLERANCE,
                            "error": policy.error,
                            "noise_z": policy.noise_z,
                            "start_noise": noise,
                        },
                    }
                    rerun: list[float] = []
                    for s in layout:
                        rerun.append(_audit_draw(rng, 100.0 * (1 + change), b[s], 0.0))
                        stop, judged = decide({"m": rerun}, rule, len(rerun))
                        if stop is not None:
                            break
                    call = judged["m"]["verdict"]
                    runs += 1
                    decided += call is not None
                    wrong += call is not None and call != truth
                worst = max(worst, wrong / trials)
            how = "told the record's measured start sd" if measured else "told nothing, as before"
            rows.append(
                _row(
                    "audit --rerun stop, 3 starts a side: a wrong call (worst of the 3 truths)",
                    f"start sd {start_sd:.0%}, {how}; decided {decided / runs:.0%}",
                    trials,
                    policy.error,
                    worst,
                    round(time.monotonic() - started, 2),
                )
            )
    return rows


def _audit_draw(rng: random.Random, base: float, offset: float, slow: float) -> float:
    value = base * offset * (1 + 0.01 * rng.gauss(0, 1))
    return value * 0.85 if rng.random() < slow else value


def audit_rows(seed: int, trials: int) -> list[Row]:
    """The stop's wrong calls with and without slow repeats, across start sds."""
    policy = AuditStopPolicy()
    rows: list[Row] = []
    for slow in (0.0, 0.2):
        for start_sd in (0.0, 0.01, 0.02):
            for told in (False, True) if start_sd else (False,):
                started = time.monotonic()
                wrong = decided = runs = 0
                for change in (0.0, AUDIT_TOLERANCE, -AUDIT_TOLERANCE):
                    truth = "same" if change == 0 else "higher" if change > 0 else "lower"
                    rng = random.Random(f"audit-{seed}-{slow}-{start_sd}-{told}-{change}")
                    for _ in range(trials):
                        a_off = 1 + start_sd * rng.gauss(0, 1)
                        b_off = 1 + start_sd * rng.gauss(0, 1)
                        record = [_audit_draw(rng, 100.0, a_off, slow) for _ in range(10)]
                        rule = {
                            "min": policy.min_repeats,
                            "max": 10,
                            "metrics": ["m"],
                            "against": {
                                "reference": {"m": record},
                                "tolerance": AUDIT_TOLERANCE,
                                "error": policy.error,
                                "noise_z": policy.noise_z,
                                "start_noise": math.log1p(start_sd) if told else 0.0,
                            },
                        }
                        rerun: list[float] = []
                        while True:
                            rerun.append(_audit_draw(rng, 100.0 * (1 + change), b_off, slow))
                            stop, judged = decide({"m": rerun}, rule, len(rerun))
                            if stop is not None:
                                break
                        call = judged["m"]["verdict"]
                        runs += 1
                        decided += call is not None
                        wrong += call is not None and call != truth
                said = ", told the start sd" if told else ""
                rows.append(
                    _row(
                        "audit --rerun stop: a wrong call",
                        f"{slow:.0%} slow repeats, start sd {start_sd:.0%}{said}; "
                        f"decided {decided / runs:.0%}",
                        runs,
                        policy.error,
                        wrong / runs,
                        round(time.monotonic() - started, 2),
                    )
                )
    return rows


def _ar1(phi: float, sd: float) -> Callable[[random.Random], Callable[[], float]]:
    def source(rng: random.Random) -> Callable[[], float]:
        state = [rng.gauss(0, 1)]

        def draw() -> float:
            state[0] = phi * state[0] + math.sqrt(1 - phi * phi) * rng.gauss(0, 1)
            return 100 * (1 + sd * state[0])

        return draw

    return source


def _iid(one: Callable[[random.Random], float]) -> Callable[[random.Random], Callable[[], float]]:
    return lambda rng: lambda: one(rng)


def _numeric_median(source: Callable[[random.Random], Callable[[], float]]) -> float:
    draw = source(random.Random("median"))
    return statistics.median(draw() for _ in range(200_000))


UNTIL_CASES: dict[str, tuple[Callable[[random.Random], Callable[[], float]], float | None]] = {
    "normal (2 % noise)": (_iid(lambda r: 100 * (1 + 0.02 * r.gauss(0, 1))), 100.0),
    "skewed (exponential tail)": (
        _iid(lambda r: 100 * (1 + 0.02 * r.expovariate(1.0))),
        100 * (1 + 0.02 * math.log(2)),
    ),
    "bimodal (40 % of repeats +6 %)": (
        _iid(lambda r: (100 if r.random() < 0.6 else 106) * (1 + 0.005 * r.gauss(0, 1))),
        None,
    ),
    "autocorrelated (AR(1) 0.8)": (_ar1(0.8, 0.02), 100.0),
}


def until_rows(seed: int, trials: int) -> list[Row]:
    """Coverage of the recorded median interval given "settled"."""
    rule = {"min": 3, "max": 12, "until": 0.02, "confidence": 0.9, "metrics": ["t"]}
    rows: list[Row] = []
    for name, (source, true_median) in UNTIL_CASES.items():
        started = time.monotonic()
        truth = true_median if true_median is not None else _numeric_median(source)
        settled = covered = 0
        for trial in range(trials):
            draw = source(random.Random(f"until-{seed}-{name}-{trial}"))
            values: list[float] = []
            for n in range(1, 13):
                values.append(draw())
                stop, judged = decide({"t": values}, rule, n)
                if stop is not None:
                    break
            if stop == "settled":
                settled += 1
                covered += judged["t"]["low"] <= truth <= judged["t"]["high"]
        rows.append(
            _row(
                "repeats until: the settled interval misses the median",
                f"{name}, until 2 %, 3..12 repeats, 90 % stated; settled {settled / trials:.0%}",
                settled,
                0.1,
                1.0 - covered / settled if settled else float("nan"),
                round(time.monotonic() - started, 2),
            )
        )
    return rows


def _row(
    verdict: str,
    condition: str,
    trials: int,
    stated: float | None,
    measured: float,
    seconds: float,
) -> Row:
    return {
        "verdict": verdict,
        "condition": condition,
        "trials": trials,
        "stated_rate": stated,
        "measured_rate": round(measured, 4),
        "seconds": seconds,
    }


def rows(seed: int = 0, quick: bool = False) -> list[dict[str, object]]:
    """Every row: diff, run diff, diff with starts, the audit stop (one start, and three a
    side) and repeats until."""
    return [
        *diff_rows(seed, 200 if quick else 1000),
        *diff_starts_rows(seed, 200 if quick else 1000),
        *audit_rows(seed, 100 if quick else 1000),
        *audit_starts_rows(seed, 100 if quick else 1000),
        *until_rows(seed, 300 if quick else 2000),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for row in rows(args.seed, args.quick):
        stated: Any = row["stated_rate"]
        said = "-" if stated is None else f"{stated:.1%}"
        print(
            f"{row['verdict']:<68} {row['condition']:<64} n={row['trials']:<5} "
            f"stated {said:>6} measured {float(row['measured_rate']):7.2%} {row['seconds']}s"  # type: ignore[arg-type]
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
