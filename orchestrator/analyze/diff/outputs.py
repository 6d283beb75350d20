"""The outputs section of `orch diff`, beside the metrics: the greedy fingerprints compared
("outputs changed on 7 of 32 prompts", each changed answer A -> B), the accuracy task on both
sides, and a speculative cell whose outputs left its non-speculative twin's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.analyze.diff.model import SECTION_TITLES, Entry, Section
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.outputs import (
    accuracy_of,
    answer_text,
    compare_fingerprints,
    prompt_label,
    speculative_warning,
    unstable_passes,
)


def _fingerprint(cell: CellEvidence) -> Mapping[str, Any]:
    found = cell.outputs.get("fingerprint")
    return found if isinstance(found, Mapping) else {}


def outputs_section(a: CellEvidence, b: CellEvidence) -> Section:
    """Both cells' outputs; its first note is the headline when both have a fingerprint."""
    section = Section("outputs", SECTION_TITLES["outputs"])
    fa, fb = _fingerprint(a), _fingerprint(b)
    if fa and fb:
        change = compare_fingerprints(fa, fb)
        section.notes.append(change.headline)
        for i in change.changed:
            section.entries.append(Entry(prompt_label(i), answer_text(fa, i), answer_text(fb, i)))
        warning = speculative_warning(a.cell, b.cell, change)
        if warning:
            section.notes.append(warning)
        if fa.get("hashed") == "text":
            section.notes.append("the server returned no token ids: answers' text was hashed")
    elif fa or fb:
        section.notes.append(f"only {'A' if fa else 'B'} has a fingerprint")
    for side, fp in (("A", fa), ("B", fb)):
        moved = unstable_passes(fp)
        if moved:
            section.notes.append(
                f"{side}'s greedy outputs differed between passes of one server on "
                f"{len(moved)} prompts: {', '.join(str(i) for i in moved)}"
            )
    acc_a, acc_b = accuracy_of(a.outputs), accuracy_of(b.outputs)
    if acc_a is not None or acc_b is not None:
        shown = [None if v is None else f"{v:.1%}" for v in (acc_a, acc_b)]
        if acc_a != acc_b:
            section.entries.insert(0, Entry("accuracy (bundled arithmetic)", shown[0], shown[1]))
        else:
            section.notes.append(f"accuracy (bundled arithmetic): {shown[0]} on both")
    return section
