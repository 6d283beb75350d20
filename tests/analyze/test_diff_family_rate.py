"""Issue 36 item 3: `orch diff` tests every sample size with one exact test in Holm's family.

Measured by seeded simulation, not shown by one example: two cells of n = 2..8 repeats a side,
18 metrics (1 deciding, 17 others), no change; the share of diffs that call any metric of a
family changed (the family-wise false-positive rate) stays at most 5 % within two standard
errors. The old rule ("ranges do not overlap" below 5 repeats, outside Holm) called 33 % of
single metrics at 2 v 2 and 10 % at 3 v 3, so nearly every diff of 17 metrics.
"""

from __future__ import annotations

import random

import pytest

from orchestrator.analyze.diff.model import MetricDelta, metric_deltas
from orchestrator.analyze.evidence import CellEvidence

METRICS = ["output_throughput", *(f"metric_{i:02d}" for i in range(17))]
TRIALS = 300


def _cell(rng: random.Random, n: int, shift: float) -> CellEvidence:
    repeats = [
        {"n": i + 1, **{m: 100 * (1 + shift) * (1 + 0.02 * rng.gauss(0, 1)) for m in METRICS}}
        for i in range(n)
    ]
    return CellEvidence.of_metrics({"repeats": repeats})


def _deltas(rng: random.Random, n: int, shift: float) -> list[MetricDelta]:
    a, b = _cell(rng, n, 0.0), _cell(rng, n, shift)
    # the threshold off: the test alone decides, its level is what is measured
    return metric_deltas(a, b, ["output_throughput"], ratio_threshold=0.0, alpha=0.05)


@pytest.mark.parametrize("n", range(2, 9))
def test_the_family_wise_false_positive_rate_holds_at_every_size(n: int) -> None:
    rng = random.Random(f"family-{n}")
    hits = {True: 0, False: 0}
    for _ in range(TRIALS):
        deltas = _deltas(rng, n, 0.0)
        for decides in (True, False):
            hits[decides] += any(m.significant for m in deltas if m.decides is decides)
    margin = 2 * (0.05 * 0.95 / TRIALS) ** 0.5
    assert hits[True] / TRIALS <= 0.05 + margin, hits
    assert hits[False] / TRIALS <= 0.05 + margin, hits


def test_sizes_that_cannot_reach_alpha_say_so_and_larger_ones_find_a_shift() -> None:
    rng = random.Random("power")
    small = _deltas(rng, 5, 0.30)
    others = [m for m in small if not m.decides]
    assert not any(m.significant for m in others)  # 17 x 0.0079 = 0.13: never below 5 %
    assert all(m.cannot_reach == "5 v 5: cannot reach 5% in a family of 17; smallest p 0.0079"
               for m in others)  # fmt: skip
    assert next(m for m in small if m.decides).significant  # the deciding one alone can
    assert all(m.significant and m.cannot_reach is None for m in _deltas(rng, 6, 0.30))
