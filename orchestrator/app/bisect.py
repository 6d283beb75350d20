"""`orch bisect` as a service: the bisection of one cell of a plan between two refs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.app.plan import Plan
from orchestrator.execute.bisect.run import Bisection, BisectSetup, pick_bisect_cell
from orchestrator.execute.bisect.search import BisectPolicy
from orchestrator.execute.refs import pin_revision
from orchestrator.results.read import open_run


@dataclass(frozen=True)
class BisectRequest:
    """Which cell, between which refs, judged by which metric, and how hard to look."""

    selector: str
    good: str
    bad: str
    metric: str | None = None  # default: the cell's first expectation, else output_throughput
    results_dir: Path = Path("results")
    resume: str | None = None  # a bisect run to continue
    all_parents: bool = False
    policy: BisectPolicy = field(default_factory=BisectPolicy)
    argv: Sequence[str] = ()


def prepare_bisect(plan: Plan, request: BisectRequest) -> Bisection:
    """The bisection `request` asks of `plan`: a resumed run keeps its first start's commits."""
    base, commit_axes = pick_bisect_cell(list(plan.cells), request.selector)
    metric = request.metric or next(iter(base.expect), "output_throughput")
    run_id = None
    refs: dict[str, dict[str, Any]] = {}
    if request.resume:
        run = open_run(request.resume, request.results_dir)
        run_id = run.path.name
        refs = dict((run.run or {}).get("bisect_refs") or {})  # the first start's commits
    for key, ref in (("--good", request.good), ("--bad", request.bad)):
        if ref not in refs:
            res = pin_revision(base, plan.inventory, ref, key_path=key)
            if res is not None and res.sha is not None:
                refs[ref] = res.to_json()
    setup = BisectSetup(
        base=base,
        host=plan.inventory.hosts[base.host],
        inventory=plan.inventory,
        good=request.good,
        bad=request.bad,
        metric=metric,
        results_dir=request.results_dir,
        playbook_name=plan.playbook.name,
        playbook_files=plan.playbook.files,
        playbook_dir=plan.playbook.path.parent,
        argv=list(request.argv),
        first_parent=not request.all_parents,
        commit_axes=commit_axes,
        secret_vars=plan.variables,
        refs=refs,
        policy=request.policy,
    )
    return Bisection(setup, run_id=run_id)
