"""GPU time to a verdict: a fixed number of repeats against comparisons that stop when they know.

    .venv/bin/python bench/time_to_verdict.py [--trials 500] [--noise 0.01 0.02 0.03 0.05]
        [--fixed 6] [--tolerance 0.04] [--seed 0]

Comparisons with a known truth, B against A: a 5% and a 10% regression, no change, and no
change on a noisy host where 2 of A's repeats are outliers 15% slow. Each repeat is the
throughput the simulator's performance model predicts for the demo's good commit (EAGLE-3 2-step,
tp 8, tuned NCCL) times (1 + a seeded gaussian of the given relative noise); it costs the GPU the
demo's 4 requests x 512 output tokens at that throughput (its bench seconds).

  fixed:       `--fixed` repeats a side, then `stats.compare` (a ratio threshold of --tolerance
               and Mann-Whitney U must agree, as `orch diff` and `audit` judge): a change, or
               "same" when it is not shown.
  sequential:  `analyze/sequential.py` with its defaults: A, B, A, B... stopping when its test
               calls higher, lower or same, "unsure" at its cap.

A second table does the same for `orch audit --rerun`, where A is the record (its repeats are
already spent, `--fixed` of them) and only the rerun B costs: every repeat of the cell, or the
runner's stop against the record (execute/audit/stopping.py, up to the same count), both judged
by the controller's verdict on what ran (`stats.compare`, as `audit` judges).

Printed per row: right (the call matches the truth), wrong (a change called for none, or a change
called "same" or the wrong way), unsure, the mean repeats and bench seconds of a comparison.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from tabulate import tabulate  # noqa: E402

from orchestrator.analyze.sequential import ComparePolicy, compare_in_rounds  # noqa: E402
from orchestrator.analyze.stats import compare  # noqa: E402
from orchestrator.execute.audit.stopping import AuditStopPolicy  # noqa: E402
from orchestrator.runner.repeat_rule import decide  # noqa: E402
from orchestrator.sim import model as m  # noqa: E402

TOKENS_PER_REPEAT = 4 * 512
TUNED_NCCL = m.DEMO_TUNED_NCCL
EAGLE3_2 = m.DEMO_EAGLE3_2
# (label, B's change, outliers in A, the truth)
CASES = (
    ("5% regression", -0.05, 0, "lower"),
    ("10% regression", -0.10, 0, "lower"),
    ("no change", 0.0, 0, "same"),
    ("no change, 2 outliers", 0.0, 2, "same"),
)


def fixed_call(a: Sequence[float], b: Sequence[float], tolerance: float) -> str:
    """What a fixed-size comparison says: a change when it is shown, else same."""
    result = compare(a, b, ratio_threshold=tolerance)
    if not result.significant or result.ratio is None:
        return "same"
    return "lower" if result.ratio < 1 else "higher"


class Tally:
    """One method's row."""

    def __init__(self) -> None:
        self.right = self.wrong = self.unsure = self.trials = 0
        self.repeats: list[int] = []
        self.seconds: list[float] = []

    def add(self, call: str, truth: str, values: Sequence[float]) -> None:
        self.trials += 1
        self.right += call == truth
        self.unsure += call == "unsure"
        self.wrong += call not in (truth, "unsure")
        self.repeats.append(len(values))
        self.seconds.append(sum(TOKENS_PER_REPEAT / v for v in values))

    def cells(self) -> list[str]:
        n = self.trials
        return [
            f"{100 * self.right / n:.1f}%",
            f"{100 * self.wrong / n:.1f}%",
            f"{100 * self.unsure / n:.1f}%",
            f"{statistics.fmean(self.repeats):.1f}",
            f"{statistics.fmean(self.seconds):.0f}",
        ]


def drawers(
    rng: random.Random, base: float, change: float, noise: float, outliers: int, most: int
) -> tuple[Callable[[], float], Callable[[], float]]:
    """A's and B's repeats; `outliers` of A's first `most` repeats are 15% slow."""
    slow = set(rng.sample(range(most), outliers))
    count = [0]

    def draw_a() -> float:
        value = base * (1 + noise * rng.gauss(0.0, 1.0))
        count[0] += 1
        return value * 0.85 if count[0] - 1 in slow else value

    def draw_b() -> float:
        return base * (1 + change) * (1 + noise * rng.gauss(0.0, 1.0))

    return draw_a, draw_b


def audit_rerun(
    a: Sequence[float], draw_b: Callable[[], float], tolerance: float, most: int
) -> list[float]:
    """The rerun's repeats as the runner's stop against the record `a` leaves them."""
    stop = AuditStopPolicy()
    against = {"reference": {"m": list(a)}, "tolerance": tolerance, "error": stop.error}
    rule = {
        "min": stop.min_repeats,
        "max": most,
        "metrics": ["m"],
        "against": {**against, "noise_z": stop.noise_z},
    }
    b: list[float] = []
    while True:
        b.append(draw_b())
        if decide({"m": b}, rule, len(b))[0] is not None:
            return b


def audit_table(args: argparse.Namespace, base: float, tolerance: float) -> None:
    """Fixed reruns against stopped ones, A the record: only the rerun's repeats cost."""
    rows, totals = [], {"fixed": Tally(), "stopped": Tally()}
    for noise in args.noise:
        for label, change, outliers, truth in CASES:
            tallies = {"fixed": Tally(), "stopped": Tally()}
            for trial in range(args.trials):
                rng = random.Random(f"audit-{args.seed}-{noise}-{label}-{trial}")
                draw_a, draw_b = drawers(rng, base, change, noise, outliers, args.fixed)
                a = [draw_a() for _ in range(args.fixed)]
                full = [draw_b() for _ in range(args.fixed)]
                stopped = audit_rerun(a, draw_b, tolerance, args.fixed)
                for kind, b in (("fixed", full), ("stopped", stopped)):
                    for tally in (tallies[kind], totals[kind]):
                        tally.add(fixed_call(a, b, tolerance), truth, b)
            rows.append([f"{100 * noise:g}%", label, *tallies["fixed"].cells()])
            rows[-1] += tallies["stopped"].cells()
    rows.append(["all", "", *totals["fixed"].cells(), *totals["stopped"].cells()])
    headers = ["noise", "truth"] + [
        f"{side} {what}"
        for side in ("every", "stopped")
        for what in ("right", "wrong", "unsure", "repeats", "bench s")
    ]
    print(f"\norch audit --rerun: the record has {args.fixed} repeats; the rerun's cost only")
    print(tabulate(rows, headers=headers))
    full_s = statistics.fmean(totals["fixed"].seconds)
    stop_s = statistics.fmean(totals["stopped"].seconds)
    print(
        f"\nrerun bench seconds per cell: every repeat {full_s:.0f}, stopped {stop_s:.0f} "
        f"({100 * (stop_s / full_s - 1):+.0f}%)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=500)
    p.add_argument("--noise", type=float, nargs="+", default=[0.01, 0.02, 0.03, 0.05])
    p.add_argument("--fixed", type=int, default=6, help="repeats a side of the fixed method")
    p.add_argument("--tolerance", type=float, default=ComparePolicy.tolerance)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    policy = ComparePolicy(tolerance=args.tolerance)
    base = m.predict_output_throughput(m.model_params(), EAGLE3_2, TUNED_NCCL, 1024, 512)
    print(
        f"model throughput {base:.2f} tok/s; fixed: {args.fixed} repeats a side; sequential: "
        f"tolerance {policy.tolerance:g}, error {policy.error:g} a test, rounds "
        f"{policy.min_rounds}..{policy.max_rounds}, noise at z {policy.noise_z:g}\n"
    )
    rows, totals = [], {"fixed": Tally(), "sequential": Tally()}
    started = time.monotonic()
    for noise in args.noise:
        for label, change, outliers, truth in CASES:
            tallies = {"fixed": Tally(), "sequential": Tally()}
            for trial in range(args.trials):
                rng = random.Random(f"{args.seed}-{noise}-{label}-{trial}")
                most = max(args.fixed, policy.max_rounds)
                draw_a, draw_b = drawers(rng, base, change, noise, outliers, most)
                a = [draw_a() for _ in range(args.fixed)]
                b = [draw_b() for _ in range(args.fixed)]
                for tally in (tallies["fixed"], totals["fixed"]):
                    tally.add(fixed_call(a, b, policy.tolerance), truth, a + b)
                draw_a, draw_b = drawers(rng, base, change, noise, outliers, most)
                decision, sa, sb = compare_in_rounds(draw_a, draw_b, policy)
                for tally in (tallies["sequential"], totals["sequential"]):
                    tally.add(str(decision.call), truth, sa + sb)
            fixed, seq = tallies["fixed"].cells(), tallies["sequential"].cells()
            rows.append([f"{100 * noise:g}%", label, *fixed, *seq])
    rows.append(["all", "", *totals["fixed"].cells(), *totals["sequential"].cells()])
    headers = ["noise", "truth"] + [
        f"{side} {what}"
        for side in ("fixed", "seq")
        for what in ("right", "wrong", "unsure", "repeats", "bench s")
    ]
    print(tabulate(rows, headers=headers))
    fixed_s = statistics.fmean(totals["fixed"].seconds)
    seq_s = statistics.fmean(totals["sequential"].seconds)
    print(
        f"\nbench seconds per comparison: fixed {fixed_s:.0f}, sequential {seq_s:.0f} "
        f"({100 * (seq_s / fixed_s - 1):+.0f}%); {args.trials} trials a row "
        f"({time.monotonic() - started:.1f} s)"
    )
    audit_table(args, base, policy.tolerance)
    return 0


if __name__ == "__main__":
    sys.exit(main())
