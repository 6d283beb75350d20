"""`orch diff`'s profile section: the phase that grew most first, noise kept out of sight."""

from __future__ import annotations

from typing import Any

from orchestrator.analyze.diff.profile import grown, phase_changes, profile_section
from orchestrator.analyze.evidence import CellEvidence

GOOD = {"steps": 20, "phases_ms_per_step": {"draft steps": 0.8, "target verify forward": 19.0,
        "all-reduce": 0.79}, "kernels_ms_per_step": {"gemm": 12.0}}  # fmt: skip
BAD = {"steps": 20, "phases_ms_per_step": {"draft steps": 0.8, "target verify forward": 29.1,
       "all-reduce": 0.8}, "kernels_ms_per_step": {"gemm": 17.5}}  # fmt: skip


def evidence(profile: dict[str, Any]) -> CellEvidence:
    return CellEvidence.of_metrics({}, profile=profile)


def test_the_phase_that_grew_most_comes_first() -> None:
    first = [c[0] for c in phase_changes(GOOD, BAD)][:2]
    assert first == ["target verify forward", "kernels: gemm"]
    assert grown(GOOD, BAD) == "target verify forward: 19.0 -> 29.1 ms per step (+53%)"
    assert grown(BAD, GOOD) is None  # nothing grew
    assert grown(GOOD, {}) is None


def test_the_section_shows_changes_and_keeps_noise_in_json() -> None:
    section = profile_section(evidence(GOOD), evidence(BAD))
    shown = [e for e in section.entries if not e.within_tolerance]
    assert [(e.key, e.a, e.b, e.note) for e in shown] == [
        ("target verify forward", "19.00 ms", "29.10 ms", "+53%"),
        ("kernels: gemm", "12.00 ms", "17.50 ms", "+46%"),
    ]
    assert {e.key for e in section.entries if e.within_tolerance} == {"all-reduce", "draft steps"}
    one = profile_section(evidence(GOOD), evidence({}))
    assert not one.entries and one.notes == ["only A has a profile"]
