"""`orch investigate`'s judgements on samples: the four outcomes of "is it real, is it still
there?", each experiment's verdict, and the report's one sentence."""

from __future__ import annotations

import random

import pytest

from orchestrator.analyze.investigate.report import render_markdown, verdict_sentence
from orchestrator.analyze.investigate.verdicts import effect, judge, reproduction


def sample(center: float, n: int = 6, noise: float = 0.01, seed: int = 0) -> list[float]:
    rng = random.Random(f"{center}-{n}-{seed}")
    return [center * (1 + noise * rng.gauss(0, 1)) for _ in range(n)]


FAST, SLOW = 94.0, 60.0


@pytest.mark.parametrize(
    ("good_now", "bad_now", "outcome"),
    [
        (FAST, SLOW, "reproduces"),
        (SLOW, SLOW, "host_changed"),  # GOOD measures like BAD did
        (FAST, FAST, "transient"),  # BAD measures like GOOD did
    ],
)
def test_the_outcomes_of_measuring_again(good_now: float, bad_now: float, outcome: str) -> None:
    got = reproduction(
        sample(FAST, seed=1),
        sample(SLOW, seed=2),
        sample(good_now, seed=3),
        sample(bad_now, seed=4),
        tolerance=0.03,
    )
    assert got.outcome == outcome
    assert got.line("tok/s").startswith(
        {
            "reproduces": "the regression reproduces",
            "host_changed": "GOOD is as slow as BAD today",
            "transient": "BAD is as fast as GOOD today",
        }[outcome]
    )


def test_a_recorded_change_within_noise_stops_before_anything_runs() -> None:
    got = reproduction(sample(94, noise=0.03, seed=1), sample(93, noise=0.03, seed=2), None, None,
                       tolerance=0.03)  # fmt: skip
    assert got.outcome == "not_significant" and got.now is None
    assert "nothing to explain" in got.line("tok/s")


def test_effect_interval_covers_the_true_change_about_95_percent() -> None:
    """Measured, not asserted: 400 pairs of 6 lognormal-ish repeats, a true +4 % change."""
    covered = 0
    for seed in range(400):
        a, b = sample(100, seed=seed, noise=0.02), sample(104, seed=seed + 10_000, noise=0.02)
        e = effect(a, b, tolerance=0.03)
        covered += e.low <= 0.04 <= e.high
    assert 0.90 <= covered / 400 <= 0.99, covered


def test_each_experiment_is_judged_against_bad_now_with_its_share_of_the_gap() -> None:
    good_now, bad_now = sample(FAST, seed=1), sample(SLOW, seed=2)
    found = {
        f.label: f
        for f in judge(
            bad_now,
            good_now,
            {
                "commit": sample(90.0, seed=3),  # most of the way back
                "env NCCL_ALGO": sample(65.0, seed=4),  # a real, smaller part
                "server --max-running-requests": sample(60.2, seed=5),  # nothing
                "bench --num-prompts": sample(55.0, seed=6),  # the other way
                "env FAILED": None,
            },
            tolerance=0.03,
        )
    }
    assert found["commit"].verdict == "explains" and found["commit"].share > 0.85
    assert found["env NCCL_ALGO"].verdict == "partly"
    assert found["server --max-running-requests"].verdict == "ruled_out"
    assert found["bench --num-prompts"].verdict == "worse"
    assert found["env FAILED"].verdict == "not_measured"
    # Holm over the four measured experiments: every adjusted p at least the raw one
    for f in found.values():
        if f.effect is not None:
            assert f.p_adjusted is not None and f.p_adjusted >= f.effect.p_welch
    assert "ruled out" in found["server --max-running-requests"].line()


def test_an_effect_whose_interval_holds_zero_is_neither_called_nor_ruled_out() -> None:
    """3 against 3 with separated ranges passes the ranges check, but a wide interval that
    holds zero keeps the report from calling it, and reaching past the tolerance from ruling
    it out: inconclusive, with what would decide it."""
    bad_now = [60.0, 61.5, 58.5]
    experiment = [61.8, 62.5, 63.9]  # above every BAD-now value
    (f,) = judge(bad_now, sample(FAST, seed=1), {"x": experiment}, tolerance=0.03)
    # 3 v 3: the exact test's p is 0.1 at best (issue 36 item 3), the interval holds zero too
    assert f.effect is not None and not f.effect.significant
    assert f.effect.low < 0 < f.effect.high  # ...the interval does not
    assert f.effect.high > 0.03  # and it reaches past the tolerance
    assert f.verdict == "inconclusive"
    assert "would rule it out" in f.line() and "repeats in all would decide" in f.line()


def test_the_report_says_the_cause_first_then_what_was_ruled_out() -> None:
    doc = {
        "metric": "output_throughput",
        "good": "r1/good",
        "bad": "r2/bad",
        "host": "gpu01",
        "tolerance": 0.03,
        "reproduction": {"outcome": "reproduces", "line": "the regression reproduces: ..."},
        "factors": [{"label": "commit", "good": "a" * 40, "bad": "b" * 40, "testable": True}],
        "experiments": [
            {
                "label": "commit: bbb -> aaa",
                "verdict": "explains",
                "line": "",
                "measured": "+45.0% ± 3.0%",
                "effect": {"change": 0.45},
            },
            {
                "label": "env NCCL_ALGO: (not set) -> Ring",
                "verdict": "ruled_out",
                "line": "",
                "measured": "+0.4% ± 1.1%",
                "effect": {"change": 0.004},
            },
        ],
        "host_facts": ["Hardware: gpu0 sm clock: 1980 -> 990"],
        "bisect": {
            "first_bad": "c" * 40,
            "message": "ccc is the first bad commit",
            "story": "commit ccc\nAuthorDate: Tue Jul 1 16:30:00 2025 +0000\n\n"
            "    [Spec] Refactor EAGLE verify\n",
        },
        "cells": {},
    }
    said = verdict_sentence(doc)
    assert said.startswith("the change is commit cccccccccccc '[Spec] Refactor EAGLE verify'")
    assert "ruled out: env NCCL_ALGO" in said and "1 host difference" in said
    md = render_markdown(doc)
    assert md.index(said) < md.index("## Factors") < md.index("## Bisect")
    assert "+0.4% ± 1.1%" in md and "gpu0 sm clock: 1980 -> 990" in md
    gone = {**doc, "reproduction": {"outcome": "transient", "line": "BAD is as fast as GOOD"}}
    assert verdict_sentence(gone) == "BAD is as fast as GOOD"


def test_the_html_report_is_self_contained_and_escapes_what_a_bundle_says() -> None:
    from orchestrator.analyze.investigate.html import render_html

    doc = {
        "metric": "output_throughput",
        "host": "gpu01",
        "tolerance": 0.03,
        "reproduction": {"outcome": "transient", "line": "BAD is as fast as GOOD today"},
        "factors": [
            {"label": "env X", "good": "<script>alert(1)</script>", "bad": None, "testable": True}
        ],
        "experiments": [
            {
                "label": "env X: (not set) -> <script>",
                "verdict": "ruled_out",
                "measured": "+0.1% ± 1.0%",
                "effect": {"change": 0.001},
            }
        ],
        "cells": {"env X: (not set) -> <script>": {"id": "bad-x", "path": "cells/bad-x"}},
        "changed": ["hardware: GPU 0 clocks.sm: 990 -> 1980"],
    }
    page = render_html(doc)
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page
    assert "<strong>BAD is as fast as GOOD today</strong>" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert '<a href="cells/bad-x">bad-x</a>' in page  # the experiment's own bundle
    assert "src=" not in page and "http" not in page.split("</style>")[1]
    assert "<li>hardware: GPU 0 clocks.sm: 990 -&gt; 1980</li>" in page


def test_a_record_too_small_to_reach_alpha_is_measured_again_not_dismissed() -> None:
    # 3 v 3 cannot reach 5 % with the exact rank test (smallest p 0.1): a -30 % record is
    # "unsettled", measured again, and judged on what is measured now.
    good, bad = [100.0, 101.0, 99.0], [70.0, 71.0, 69.0]
    first = reproduction(good, bad, None, None, tolerance=0.03)
    assert first.outcome == "unsettled"
    assert "too few repeats recorded" in first.line("tput")
    now = reproduction(good, bad, [100.0, 100.5, 99.5, 101.0, 99.0], [70.0, 70.5, 69.5, 71.0, 69.0],
                       tolerance=0.03)  # fmt: skip
    assert now.outcome == "reproduces"
    # within the tolerance, a small record is still "not significant": nothing to explain
    assert reproduction(good, [99.0, 100.0, 98.5], None, None, tolerance=0.03).outcome == (
        "not_significant"
    )
