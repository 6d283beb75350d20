"""`orch investigate`'s steps 2c and 2b (a second look at what is inconclusive; factors
together) and what the plan says of its verdicts.

An inconclusive experiment is measured again, with BAD now, within the budget, and judged once
more; a verdict given at its first look is printed and stays as printed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.investigate.factors import relabeled, swapped
from orchestrator.analyze.investigate.verdicts import Finding
from orchestrator.cell import Cell
from orchestrator.execute.bisect.search import BisectPolicy
from orchestrator.execute.investigate.experiments import (
    EXPERIMENT_REPEATS,
    FOLLOW_UP_MAX,
    LOOKS,
    REFERENCE_REPEATS,
    Experiment,
    follow_up_repeats,
)
from orchestrator.execute.investigate.sides import Side


class Investigation(Protocol):
    """What these steps need of execute/investigate/run.py's Investigation."""

    bad: Side
    bad_now: list[float] | None
    spent: int

    @property
    def request(self) -> Any: ...
    def out(self, line: str) -> None: ...
    def budget(self) -> int: ...
    def _cell(self, data: Mapping[str, Any]) -> Cell: ...
    def _repeats(self, cell: Mapping[str, Any], repeats: int) -> dict[str, Any]: ...
    def _stopping(self, data: Mapping[str, Any], bad_now: CellEvidence | None) -> Cell: ...
    def _note_starts(self, label: str, evidence: CellEvidence | None) -> None: ...
    def _run(self, experiments: Sequence[Experiment]) -> dict[str, CellEvidence | None]: ...
    def _values(self, evidence: CellEvidence | None) -> list[float] | None: ...
    def _cell_ref(self, evidence: CellEvidence | None) -> dict[str, Any] | None: ...
    def _judge(
        self,
        bad_now: Sequence[float],
        good_now: Sequence[float],
        samples: Mapping[str, Sequence[float] | None],
        look: Mapping[str, int] | None = None,
    ) -> list[Finding]: ...


GOOD_NOW, BAD_NOW = "GOOD now", "BAD now"
BAD_AGAIN, LOOK_2 = "BAD now (look 2)", " (look 2)"
# BAD now's second cell, at step 2c: its spread is in every comparison.
BAD_AGAIN_REPEATS = 2 * REFERENCE_REPEATS


def bisect_allowance(policy: BisectPolicy | None = None, commits: int = 16) -> int:
    """Cells a confirmed bisect takes (one server start each), counted from its policy: each
    end's starts, one run per halving of `commits`, the confirmation's P F F P blocks and
    the ends measured again beside them, and one probe each side of the answer (20 with the
    defaults and 16 commits; 12 counted the search alone)."""
    policy = policy or BisectPolicy()
    ends = 2 * policy.end_runs
    search = math.ceil(math.log2(max(commits, 2)))
    confirm = 4 * policy.confirm_blocks + 2
    return ends + search + confirm + (2 if policy.probe else 0)


# Cells a bisect may take beyond the experiments; printed with the plan, so a user sees the
# default before anything runs.
BISECT_ALLOWANCE = bisect_allowance()
# A factor that brings back less than this share of the gap leaves room for the others together.
FULL_SHARE = 0.9


def plan_verdict_lines(family: int, tolerance: float) -> list[str]:
    """What the plan says of the verdicts: the family and the looks (the unit of replication
    is starts.StartUnit.plan_line's)."""
    return [
        f"verdicts: Holm over {family} test(s) at 5 %, each experiment looked at up to {LOOKS} "
        f"times (an inconclusive one gets more repeats); 'ruled out' needs its interval inside "
        f"±{tolerance:.0%}",
    ]


def reserved_cells(
    inv: Investigation, findings: Sequence[Finding], experiments: Sequence[Experiment]
) -> int:
    """Cells kept back for what follows the second looks: factors together, a bisect."""
    commit = next((e.label for e in experiments if e.factors[0].kind == "commit"), None)
    verdict = next((f.verdict for f in findings if f.label == commit), None)
    bisect = inv.request.bisect and verdict not in (None, "ruled_out", "worse")
    return (1 if len(experiments) >= 2 else 0) + (BISECT_ALLOWANCE if bisect else 0)


def look_again(
    inv: Investigation,
    findings: list[Finding],
    experiments: Sequence[Experiment],
    samples: Mapping[str, Sequence[float] | None],
    references: Mapping[str, CellEvidence | None],
    doc: dict[str, Any],
) -> tuple[list[Finding], dict[str, Sequence[float] | None]]:
    """Step 2c, within the budget: BAD now measured again (its spread is in every
    comparison) and each inconclusive experiment with the repeats its spread asks for, then
    judged once more on all their repeats (the second and last look). The findings already
    decided stay as printed."""
    pooled: dict[str, Sequence[float] | None] = dict(samples)
    undecided = [f for f in findings if f.verdict == "inconclusive"]
    room = inv.budget() - inv.spent - reserved_cells(inv, findings, experiments)
    if not undecided or room < 2:
        if undecided:
            doc["notes"].append(
                "inconclusive, not measured again (over the budget): "
                + ", ".join(f.label for f in undecided)
            )
        return findings, pooled
    bad_again = relabeled(inv._repeats(inv.bad.record.cell, BAD_AGAIN_REPEATS), "bad-now-2")
    again = [Experiment(BAD_AGAIN, inv._cell(bad_again))]
    by_label = {e.label: e for e in experiments}
    for f in undecided[: room - 1]:
        n = len(samples.get(f.label) or ())
        # what BAD now alone keeps open, the new BAD now repeats may settle: a middling count
        repeats = follow_up_repeats(f.more_repeats, n) or FOLLOW_UP_MAX // 2
        data = swapped(inv._repeats(inv.bad.record.cell, repeats), by_label[f.label].factors)
        axis = f"{data['axes'].get('investigate', f.label)}, look 2"
        cell = inv._cell(relabeled(data, axis))
        again.append(Experiment(f"{f.label}{LOOK_2}", cell, by_label[f.label].factors))
    left = [f.label for f in undecided[room - 1 :]]
    if left:
        doc["notes"].append(
            "inconclusive, not measured again (over the budget): " + ", ".join(left)
        )
    inv.out(f"step 2c: BAD now and {len(again) - 1} inconclusive experiment(s) measured again")
    measured = inv._run(again)
    for e in again:
        doc["cells"][e.label] = inv._cell_ref(measured[e.label])
        label = e.label.removesuffix(LOOK_2)
        inv._note_starts(BAD_NOW if e.label == BAD_AGAIN else label, measured[e.label])
        if label in pooled:
            pooled[label] = list(pooled[label] or []) + (
                inv._values(measured[label + LOOK_2]) or []
            )
    good_now = inv._values(references[GOOD_NOW]) or []
    inv.bad_now = list(inv.bad_now or []) + (inv._values(measured[BAD_AGAIN]) or [])
    looked = {e.label.removesuffix(LOOK_2) for e in again[1:]}
    judged = inv._judge(inv.bad_now, good_now, pooled, look={k: 2 for k in looked})
    out = []
    for old, new in zip(findings, judged, strict=True):
        if old.label in looked:
            n = len(pooled[old.label] or [])
            inv.out(f"  {new.line()} (look 2: {n} repeats, BAD now {len(inv.bad_now)})")
            out.append(new)
        else:
            out.append(old)  # decided at its first look: printed, so kept as printed
    return out, pooled


def together(
    inv: Investigation,
    findings: list[Finding],
    experiments: Sequence[Experiment],
    samples: Mapping[str, Sequence[float] | None],
    references: Mapping[str, CellEvidence | None],
    doc: dict[str, Any],
) -> list[Finding]:
    """Factors at once, where single ones leave the question open: all of them when none
    explains the change (does what is declared explain it at all?), and all but the
    explaining one when it leaves a share of the gap (do the rest add up to it?). `samples`
    are the experiments' values as measured, `references` GOOD and BAD measured now."""
    explains = [f for f in findings if f.verdict == "explains"]
    if not explains and len(experiments) >= 2:
        joint, label = list(experiments), "all factors together"
    elif len(explains) == 1 and (explains[0].share or 1) < FULL_SHARE:
        joint = [e for e in experiments if e.label != explains[0].label]
        label = f"all but {explains[0].label.split(':')[0]} together"
    else:
        return findings
    if len(joint) < 2:
        return findings
    if inv.spent >= inv.budget():
        doc["not_tested"].append(label)
        return findings
    factors = tuple(f for e in joint for f in e.factors)
    base = inv._repeats(inv.bad.record.cell, EXPERIMENT_REPEATS)
    cell = inv._stopping(swapped(base, factors), references[BAD_NOW])
    both = Experiment(label, cell, factors)
    inv.out(f"step 2b: {label}")
    measured = inv._run([both])
    doc["cells"][label] = inv._cell_ref(measured[label])
    inv._note_starts(label, measured[label])
    every = {**samples, label: inv._values(measured[label])}
    good_now = inv._values(references[GOOD_NOW]) or []
    judged = inv._judge(inv.bad_now or [], good_now, every)
    inv.out(f"  {judged[-1].line()}")
    # Holm's family was declared with this test in it: the verdicts printed stay as printed
    return [*findings, judged[-1]]
