"""The profile section of `orch diff`: time per phase (and kernel family) per decode step, the
phase that grew most first ("target verify forward: 19.0 -> 29.1 ms per step")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.analyze.diff.model import SECTION_TITLES, Entry, Section
from orchestrator.analyze.evidence import CellEvidence

# A phase that moved less than this, relatively, is noise: kept in JSON, not shown.
NOISE = 0.03


def _per_step(profile: Mapping[str, Any], key: str) -> dict[str, float]:
    found = profile.get(key)
    if not isinstance(found, Mapping):
        return {}
    return {str(k): float(v) for k, v in found.items() if isinstance(v, int | float)}


def phase_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """(phase, ms a, ms b) of every phase and kernel family both profiles have, the largest
    change in milliseconds first."""
    out = []
    for key, prefix in (("phases_ms_per_step", ""), ("kernels_ms_per_step", "kernels: ")):
        pa, pb = _per_step(a, key), _per_step(b, key)
        out += [(prefix + name, pa[name], pb[name]) for name in pa if name in pb]
    return sorted(out, key=lambda c: -abs(c[2] - c[1]))


def phase_line(change: tuple[str, float, float]) -> str:
    """`target verify forward: 18.9 -> 28.7 ms per step (+52%)`."""
    name, a, b = change
    rel = f" ({b / a - 1:+.0%})" if a else ""
    return f"{name}: {a:.1f} -> {b:.1f} ms per step{rel}"


def grown(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """The phase that grew most from A to B, said in one line; None without two profiles or
    when nothing grew beyond the noise."""
    for change in phase_changes(a, b):
        _, pa, pb = change
        if pb > pa and pa > 0 and pb / pa - 1 >= NOISE:
            return phase_line(change)
    return None


def profile_section(a: CellEvidence, b: CellEvidence) -> Section:
    """Both cells' profiles side by side (empty unless both have one)."""
    section = Section("profile", SECTION_TITLES["profile"])
    if not a.profile or not b.profile:
        if a.profile or b.profile:
            section.notes.append(f"only {'A' if a.profile else 'B'} has a profile")
        return section
    for name, pa, pb in phase_changes(a.profile, b.profile):
        rel = pb / pa - 1 if pa else None
        section.entries.append(
            Entry(
                name,
                f"{pa:.2f} ms",
                f"{pb:.2f} ms",
                note=f"{rel:+.0%}" if rel is not None else None,
                within_tolerance=rel is not None and abs(rel) < NOISE,
            )
        )
    steps = (a.profile.get("steps"), b.profile.get("steps"))
    section.notes.append(f"decode steps profiled: {steps[0]} / {steps[1]}")
    return section
