"""The SLO search's error rates: a level called "holds" (or "fails") when its median p99 sits
exactly at the bound, and the search's answer overstating the capacity.

Each level's repeats are drawn as the runner meets them (a log-normal p99 per repeat around the
level's true median, spread 10-30 %, optionally 20 % slow repeats at +50 %); the runner's own
stop (runner/slo_rule.py `decide_slo`) runs after every repeat, and the controller's verdict
(`bound_verdict` over the recorded repeats, as analyze/slo.py judges them) is the one counted.
A search walks four levels whose true medians are 0.5, 0.8, 1.25 and 2 times the bound: its
true capacity is the second (the power rows). For the error row the third level sits exactly
at the bound, the worst case: an answer naming it or the fourth overstates the capacity.
"""

from __future__ import annotations

import math
import random
import time

from orchestrator.runner.repeat_rule import fewest_repeats
from orchestrator.runner.slo_rule import bound_verdict, decide_slo, two_sided

Row = dict[str, object]
BOUND = 500.0
CONFIDENCE = 0.95
MOST = 8
LEVELS = (0.5, 0.8, 1.25, 2.0)  # true median / bound; the true capacity is level 2
AT_BOUND = (0.5, 0.8, 1.0, 2.0)  # the third level exactly at the bound: the worst case


def level(rng: random.Random, ratio: float, sd: float, slow: float) -> tuple[str | None, int]:
    """One level measured as the runner would: (the controller's verdict, repeats run)."""
    least = fewest_repeats(two_sided(CONFIDENCE))
    rule = {
        "min": least,
        "max": MOST,
        "confidence": CONFIDENCE,
        "metrics": ["p99_ttft_ms"],
        "slo": {"p99_ttft_ms": {"max": BOUND}},
    }
    values: list[float] = []
    for n in range(1, MOST + 1):
        value = BOUND * ratio * math.exp(rng.gauss(0.0, sd))
        values.append(value * (1.5 if rng.random() < slow else 1.0))
        reason, _ = decide_slo({"p99_ttft_ms": values}, rule, n)
        if reason is not None:
            break
    got = bound_verdict(values, {"max": BOUND}, CONFIDENCE, MOST, least)
    return got["verdict"], len(values)


def search(
    rng: random.Random, sd: float, slow: float, levels: tuple[float, ...] = LEVELS
) -> int | None:
    """A search's answer: the index of the highest level holding from the lowest up, or -1
    when the lowest does not hold; None when the walk stops at an undecided level."""
    best = -1
    for i, ratio in enumerate(levels):
        verdict, _ = level(rng, ratio, sd, slow)
        if verdict == "holds":
            best = i
            continue
        return best if verdict == "fails" else None
    return best


def _rates(seed: int, trials: int, sd: float, slow: float) -> dict[str, float]:
    """Every rate of one condition, from one seeded stream."""
    rng = random.Random(seed)
    at_bound = [level(rng, 1.0, sd, slow)[0] for _ in range(trials)]
    answers = [search(rng, sd, slow) for _ in range(trials)]
    worst = [search(rng, sd, slow, AT_BOUND) for _ in range(trials)]
    return {
        "holds": sum(v == "holds" for v in at_bound) / trials,
        "fails": sum(v == "fails" for v in at_bound) / trials,
        "over": sum(a is not None and a > 1 for a in worst) / trials,
        "right": sum(a == 1 for a in answers) / trials,
        "undecided": sum(a is None for a in answers) / trials,
    }


VERDICTS = (
    ("holds", "slo: a level at its bound called holds", 1 - CONFIDENCE),
    ("fails", "slo: a level at its bound called fails", 1 - CONFIDENCE),
    ("over", "slo: the answer overstates the capacity (a level at its bound)", 1 - CONFIDENCE),
    ("right", "slo: the search names the true capacity (power)", None),
    ("undecided", "slo: the boundary left undecided (power)", None),
)


def rows(seed: int = 0, quick: bool = False) -> list[Row]:
    """The SLO search's measured rates, one row per verdict and condition."""
    out: list[Row] = []
    trials = 400 if quick else 4000
    for sd, slow in ((0.1, 0.0), (0.3, 0.0), (0.1, 0.2)):
        began = time.perf_counter()
        rates = _rates(seed, trials, sd, slow)
        seconds = round(time.perf_counter() - began, 1)
        cond = f"per-repeat sd {sd:.0%}, {slow:.0%} slow repeats (+50 %), {MOST} repeats at most"
        for key, verdict, stated in VERDICTS:
            out.append({"verdict": verdict, "condition": cond, "trials": trials,
                        "stated_rate": stated, "measured_rate": rates[key],
                        "seconds": seconds})  # fmt: skip
    return out
