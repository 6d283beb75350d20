"""`orch investigate`'s verdicts, measured: how often each is wrong on seeded simulations that
call orch's own functions (`judge`, `holm_family`, `follow_up_repeats`, `log_effect`,
`share_interval`).

    .venv/bin/python bench/verdicts/investigate.py [--seed 0] [--quick]

The simulated investigation does what `orch investigate` does after step 1, without cells:
GOOD now and BAD now, 6 repeats each; each factor's experiment, 8 repeats; judged with Holm's
family declared up front and alpha split over two looks; where one is inconclusive, BAD now is
measured again (12 repeats) and each inconclusive experiment too (a new server start, the
repeats `follow_up_repeats` asks for), then judged once more.
A repeat is `center * exp(start + within)`: one start effect (sd `start_sd`) per cell, a within
noise per repeat; with "slow 20 %", each repeat is 10-20 % slow with probability 0.2. "Given"
rows give judge the true between-start sd (--start-sd); "not modelled" rows give it none
(--starts 1, the old behaviour: repeats inside one start as independent); "--starts 3" rows
spread every cell's repeats over 3 server starts as the runner does and judge start means
(`orch investigate`'s default where no sd is given or recorded); "recorded" rows give judge
the sd GOOD's and BAD's records estimate (10 starts each), with its degrees of freedom.

Rows (each: verdict, condition, trials, stated_rate, measured_rate, seconds):
- ruled out when it explains: one factor restores the whole +8 % gap (tolerance 3 %).
- ruled out at the tolerance: the factor's true effect is exactly +3 % (TOST's size).
- blamed a null factor: 4 factors that do nothing, a real +8 % gap: any of them "explains",
  "partly" or "worse" (Holm's family-wise rate).
- interval coverage: the 95 % Welch interval of the change, unequal variances, n 3..10.
- share coverage: the 90 % Fieller interval of a whole-gap factor's share.
- ruled out (bimodal): 3 of 7 repeats at +9 %, the rest at 0.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from orchestrator.analyze.investigate.equivalence import log_effect, share_interval  # noqa: E402
from orchestrator.analyze.investigate.verdicts import SHARE_LEVEL, Finding, judge  # noqa: E402
from orchestrator.analyze.replication import starts_document  # noqa: E402
from orchestrator.execute.investigate.experiments import (  # noqa: E402
    EXPERIMENT_REPEATS,
    FOLLOW_UP_MAX,
    LOOKS,
    REFERENCE_REPEATS,
    follow_up_repeats,
    holm_family,
)
from orchestrator.execute.investigate.starts import (  # noqa: E402
    DEFAULT_STARTS,
    start_ids,
    start_unit,
)
from orchestrator.runner.starts import runs_over_starts  # noqa: E402

TOLERANCE, NOISE, GAP = 0.03, 0.03, 0.08
BAD_AGAIN_REPEATS = 2 * REFERENCE_REPEATS  # as execute/investigate/run.py
BLAMED = ("explains", "partly", "worse")


def cell(
    rng: random.Random, center: float, n: int, *, noise: float, start_sd: float, slow: float
) -> list[float]:
    """One cell's repeats: one server start, `n` repeats."""
    start = rng.gauss(0.0, start_sd)
    out = []
    for _ in range(n):
        value = center * math.exp(start + rng.gauss(0.0, noise))
        if slow and rng.random() < slow:
            value *= 1.0 - rng.uniform(0.10, 0.20)
        out.append(value)
    return out


def investigation(
    rng: random.Random,
    effects: Sequence[float],
    *,
    noise: float = NOISE,
    start_sd: float = 0.0,
    modelled: bool = True,
    slow: float = 0.0,
    starts: int = 1,
    recorded: int = 0,
) -> list[str]:
    """The final verdict of each factor (its true effect on BAD in `effects`, relative).
    `starts` > 1: every cell spreads its repeats over that many server starts (`orch
    investigate --starts`, 3 by default), the start the unit."""
    ids: dict[str, list[str]] = {}
    cells: dict[str, int] = {}

    def measured(label: str, center: float, n: int) -> list[float]:
        if starts == 1:
            return cell(rng, center, n, noise=noise, start_sd=start_sd, slow=slow)
        # as the runner spreads a cell's repeats (runner/starts.py), each start its own offset,
        # the start ids read back as the investigation reads them (execute/investigate/starts.py)
        runs = [(k, st) for kind, k, st in runs_over_starts(0, n, starts) if kind == "measure"]
        offsets = {st: rng.gauss(0.0, start_sd) for _, st in runs}
        rows = []
        for k, st in runs:
            value = center * math.exp(offsets[st] + rng.gauss(0.0, noise))
            if slow and rng.random() < slow:
                value *= 1.0 - rng.uniform(0.10, 0.20)
            rows.append({"n": k, "x": value})
        doc = {"repeats": rows, "starts": starts_document(rows, dict(runs))}
        cells[label] = cells.get(label, 0) + 1
        ids.setdefault(label, []).extend(start_ids(doc, "x", f"{label}-{cells[label]}") or [])
        return [r["x"] for r in rows]

    bad = measured("BAD now", 100.0, REFERENCE_REPEATS)
    good = measured("GOOD now", 100.0 * (1 + GAP), REFERENCE_REPEATS)
    samples: dict[str, Sequence[float] | None] = {
        f"f{i}": measured(f"f{i}", 100.0 * (1 + e), EXPERIMENT_REPEATS)
        for i, e in enumerate(effects)
    }
    given = start_sd if modelled and starts == 1 else 0.0
    dof = math.inf
    if recorded:  # the sd as GOOD's and BAD's records estimate it, `recorded` starts each
        unit = start_unit("x", [(k, record(rng, recorded, start_sd, noise)) for k in "GB"])
        given, dof = unit.judged_sd, unit.dof

    def judged(look: dict[str, int] | None = None) -> dict[str, Finding]:
        found = judge(
            bad,
            good,
            samples,
            tolerance=TOLERANCE,
            family=holm_family(len(effects)),
            looks=LOOKS,
            look=look,
            start_sd=given,
            start_dof=dof,
            starts=ids or None,
        )
        return {f.label: f for f in found}

    first = judged()
    verdicts = {k: f.verdict for k, f in first.items()}
    again = {}
    for i, e in enumerate(effects):
        label = f"f{i}"
        f = first[label]
        if f.verdict != "inconclusive":
            continue
        more = follow_up_repeats(f.more_repeats, EXPERIMENT_REPEATS) or FOLLOW_UP_MAX // 2
        again[label] = list(samples[label] or []) + measured(label, 100.0 * (1 + e), more)
    if again:  # step 2c: BAD now measured again too, then a second look at the undecided
        bad = bad + measured("BAD now", 100.0, BAD_AGAIN_REPEATS)
        samples.update(again)
        second = judged({k: 2 for k in again})
        for k in again:
            verdicts[k] = second[k].verdict
    return [verdicts[f"f{i}"] for i in range(len(effects))]


def record(rng: random.Random, starts: int, start_sd: float, noise: float) -> dict[str, object]:
    """A recorded cell's metrics.json run with `bench.starts: starts`, 3 repeats a start."""
    runs = [(k, st) for _, k, st in runs_over_starts(0, 3 * starts, starts)]
    offsets = [rng.gauss(0.0, start_sd) for _ in range(starts)]
    rows = [{"n": k, "x": math.exp(offsets[st - 1] + rng.gauss(0.0, noise))} for k, st in runs]
    return {"repeats": rows, "starts": starts_document(rows, dict(runs))}


def _rate(trials: int, hit: Callable[[random.Random], bool], seed: int) -> float:
    rng = random.Random(seed)
    return sum(hit(rng) for _ in range(trials)) / trials


def coverage_trial(rng: random.Random) -> bool:
    """A 95 % Welch interval, unequal variances (1 % and 4 %), sizes 3..10 each."""
    n_a, n_b = rng.randint(3, 10), rng.randint(3, 10)
    sd_a, sd_b = (0.01, 0.04) if rng.random() < 0.5 else (0.04, 0.01)
    a = [100 * math.exp(rng.gauss(0, sd_a)) for _ in range(n_a)]
    b = [103 * math.exp(rng.gauss(0, sd_b)) for _ in range(n_b)]
    low, high = log_effect(a, b).interval(0.95)
    return low <= 0.03 <= high


def share_trial(rng: random.Random) -> bool:
    """Fieller's 90 % interval of a whole-gap factor's share holds 1."""
    bad = [100 * math.exp(rng.gauss(0, NOISE)) for _ in range(REFERENCE_REPEATS)]
    good = [108 * math.exp(rng.gauss(0, NOISE)) for _ in range(REFERENCE_REPEATS)]
    x = [108 * math.exp(rng.gauss(0, NOISE)) for _ in range(EXPERIMENT_REPEATS)]
    low, high = share_interval(log_effect(bad, x), log_effect(bad, good), SHARE_LEVEL)
    return (low is None or low <= 1.0) and (high is None or high >= 1.0)


def bimodal_trial(rng: random.Random) -> bool:
    """3 of 7 repeats at +9 %: ruled out?"""
    bad = [100 * math.exp(rng.gauss(0, 0.005)) for _ in range(REFERENCE_REPEATS)]
    good = [108 * math.exp(rng.gauss(0, 0.005)) for _ in range(REFERENCE_REPEATS)]
    x = [100 * (1.09 if i < 3 else 1.0) * math.exp(rng.gauss(0, 0.005)) for i in range(7)]
    (f,) = judge(bad, good, {"x": x}, tolerance=TOLERANCE, looks=LOOKS)
    return f.verdict == "ruled_out"


@dataclass(frozen=True)
class Condition:
    """Start-to-start sd, whether judge is given it, and the share of slow repeats."""

    start_sd: float
    modelled: bool
    slow: float
    starts: int = 1
    recorded: int = 0  # GOOD's and BAD's records' starts, whose sd judge is given

    def _verdicts(self, rng: random.Random, effects: Sequence[float]) -> list[str]:
        return investigation(
            rng,
            effects,
            start_sd=self.start_sd,
            modelled=self.modelled,
            slow=self.slow,
            starts=self.starts,
            recorded=self.recorded,
        )

    def ruled_out_when_it_explains(self, rng: random.Random) -> bool:
        """One factor restores the whole gap: ruled out?"""
        return self._verdicts(rng, [GAP])[0] == "ruled_out"

    def does_not_explain(self, rng: random.Random) -> bool:
        """One factor restores the whole gap: anything but "explains"?"""
        return self._verdicts(rng, [GAP])[0] != "explains"

    def blamed_a_null_factor(self, rng: random.Random) -> bool:
        """Four factors that do nothing: any of them blamed?"""
        return any(v in BLAMED for v in self._verdicts(rng, [0.0] * 4))


def rows(seed: int = 0, quick: bool = False) -> list[dict[str, object]]:
    """The measured rates, one row per verdict and condition."""
    trials = 200 if quick else 1000
    out: list[dict[str, object]] = []

    def row(verdict: str, condition: str, stated: float, hit: Callable[[random.Random], bool],
            n: int = trials) -> None:  # fmt: skip
        began = time.perf_counter()
        rate = _rate(n, hit, seed)
        out.append(
            {
                "verdict": verdict,
                "condition": condition,
                "trials": n,
                "stated_rate": stated,
                "measured_rate": rate,
                "seconds": round(time.perf_counter() - began, 2),
            }
        )

    for start_sd in (0.0, 0.01, 0.02):
        for slow in (0.0, 0.2):
            for modelled in (True, False) if start_sd else (True,):
                how = f"start sd {start_sd:.0%}" + (
                    " given (--start-sd)" if modelled else " not modelled (--starts 1)"
                )
                how += f", slow {slow:.0%}" if slow else ""
                cond = Condition(start_sd, modelled, slow)
                row(
                    "ruled out when it explains",
                    f"whole +8% gap, tolerance 3%, noise 3%, {how}",
                    0.05,
                    cond.ruled_out_when_it_explains,
                )
                row(
                    "blamed a null factor",
                    f"4 null factors, +8% gap, noise 3%, {how}",
                    0.05,
                    cond.blamed_a_null_factor,
                    n=trials // 2,
                )
    for start_sd, slow in ((0.0, 0.0), (0.01, 0.0), (0.02, 0.0), (0.02, 0.2)):
        cond = Condition(start_sd, False, slow, starts=DEFAULT_STARTS)
        how = f"start sd {start_sd:.0%}, --starts {DEFAULT_STARTS} (the default), starts the unit"
        how += f", slow {slow:.0%}" if slow else ""
        row("ruled out when it explains", f"whole +8% gap, noise 3%, {how}", 0.05,
            cond.ruled_out_when_it_explains)  # fmt: skip
        row("blamed a null factor", f"4 null factors, noise 3%, {how}", 0.05,
            cond.blamed_a_null_factor, n=trials // 2)  # fmt: skip
        row("explains (power)", f"whole +8% gap, noise 3%, {how} (1 - power)", float("nan"),
            cond.does_not_explain)  # fmt: skip
    cond = Condition(0.02, False, 0.0, recorded=10)
    how = "start sd 2%, recorded by GOOD and BAD over 10 starts each (18 dof)"
    row("ruled out when it explains", f"whole +8% gap, noise 3%, {how}", 0.05,
        cond.ruled_out_when_it_explains)  # fmt: skip
    row("blamed a null factor", f"4 null factors, noise 3%, {how}", 0.05,
        cond.blamed_a_null_factor, n=trials // 2)  # fmt: skip
    row(
        "ruled out at the tolerance",
        "true effect exactly +3%, tolerance 3%, noise 1%",
        0.05,
        lambda r: investigation(r, [TOLERANCE], noise=0.01)[0] == "ruled_out",
    )
    row(
        "ruled out (power)",
        "null factor, tolerance 3%, noise 1% (1 - power)",
        float("nan"),
        lambda r: investigation(r, [0.0], noise=0.01)[0] != "ruled_out",
    )
    row(
        "ruled out (power)",
        "null factor, tolerance 3%, noise 3% (1 - power)",
        float("nan"),
        lambda r: investigation(r, [0.0])[0] != "ruled_out",
    )
    row("interval misses", "95% Welch, variances 1% v 4%, n 3..10", 0.05,
        lambda r: not coverage_trial(r), n=trials * 4)  # fmt: skip
    row("share interval misses", "90% Fieller, whole-gap factor, noise 3%", 0.10,
        lambda r: not share_trial(r), n=trials * 2)  # fmt: skip
    row("ruled out (bimodal)", "3 of 7 repeats at +9%, tolerance 3%", 0.0, bimodal_trial)
    return out


def main() -> None:
    """Print the rows as a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for r in rows(args.seed, args.quick):
        print(
            f"{r['verdict']:<28} {r['condition']:<62} {r['trials']:>5} "
            f"stated {r['stated_rate']:<5.3g} measured {r['measured_rate']:.3f}  {r['seconds']}s"
        )


if __name__ == "__main__":
    main()
