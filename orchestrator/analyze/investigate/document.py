"""investigation.json's parts that are read off evidence: the outcome and the experiments as
judged, the bisect's answer, and what differs between two cells that no cell can swap back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from orchestrator.analyze.diff.cells import diff_cells
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.investigate.verdicts import Finding, Reproduction

# Diff sections whose differences are facts of the host, not declared by the playbook.
HOST_SECTIONS = ("packages", "system", "hardware")


def positive(values: Sequence[Any]) -> list[float]:
    """The usable values of a metric: numbers above zero."""
    return [float(v) for v in values if isinstance(v, int | float) and v > 0]


def outcome_doc(state: Reproduction, findings: Sequence[Finding], metric: str) -> dict[str, Any]:
    """`reproduction` and `experiments`, as investigation.json holds them."""
    reproduction = {
        "outcome": state.outcome,
        "line": state.line(metric),
        **{
            k: asdict(v) if v is not None else None
            for k, v in (
                ("recorded", state.recorded),
                ("now", state.now),
                ("good_moved", state.good_moved),
                ("bad_moved", state.bad_moved),
            )
        },
    }
    experiments = [
        {
            "label": f.label,
            "verdict": f.verdict,
            "line": f.line(),
            "measured": f.measured(),
            "share": f.share,
            "share_range": [f.share_low, f.share_high] if f.share is not None else None,
            "p_adjusted": f.p_adjusted,
            "look": f.look,
            "more_repeats": f.more_repeats,
            "notes": list(f.notes),
            "effect": asdict(f.effect) if f.effect else None,
        }
        for f in findings
    ]
    return {"reproduction": reproduction, "experiments": experiments}


def bisect_summary(bisect: Mapping[str, Any], run: str | None) -> dict[str, Any]:
    """The bisect's answer from its bisect.json document; its bundle has the rest."""
    result = bisect.get("result") or {}
    return {
        "run": run,
        "first_bad": result.get("first_bad"),
        "message": result.get("message"),
        "story": bisect.get("first_bad_story") or "",
        "cell_runs": result.get("cell_runs"),
    }


def _section_lines(diff: Any, names: Sequence[str], *, before_start: bool = True) -> list[str]:
    lines = []
    for section in diff.sections:
        if section.name not in names:
            continue
        for entry in section.entries:
            if entry.within_tolerance or (not before_start and "before start" in entry.key):
                continue
            lines.append(f"{section.title}: {entry.key}: {entry.a} -> {entry.b}")
    return lines


def host_facts(good: CellEvidence, bad: CellEvidence) -> list[str]:
    """What differed on the host between GOOD and BAD that no cell can swap back."""
    return _section_lines(diff_cells(good, bad), HOST_SECTIONS)


def what_changed(then: CellEvidence, now: CellEvidence) -> list[str]:
    """What differs between a side as recorded and as measured now, host facts first."""
    diff = diff_cells(then, now)
    # a cell that reused its session's server saw that server on the GPUs before it started
    session = now.cell_json.get("session")
    own_start = not isinstance(session, dict) or session.get("started_server", True) is not False
    return _section_lines(diff, HOST_SECTIONS, before_start=own_start) + _section_lines(
        diff, ("environment", "code", "server_flags", "bench")
    )
