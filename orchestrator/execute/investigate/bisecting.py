"""`orch investigate`'s step 3: bisect the commit when it carries the change, as a bisect run of
its own (resumable: its run id is said in investigation.json as soon as it exists)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from orchestrator.analyze.investigate.factors import Factor
from orchestrator.cell import Cell
from orchestrator.config.host import Inventory
from orchestrator.execute.bisect.run import Bisection, BisectSetup
from orchestrator.execute.investigate.sides import Side
from orchestrator.execute.refs import pin_revision
from orchestrator.results.layout import INVESTIGATION_JSON


class Investigation(Protocol):
    """What the bisect step needs of execute/investigate/run.py's Investigation."""

    bad: Side
    host: str
    metric: str
    inventory: Inventory
    spent: int

    @property
    def request(self) -> Any: ...
    def out(self, line: str) -> None: ...
    def _cell(self, data: Mapping[str, Any]) -> Cell: ...
    def _playbook(self) -> str: ...
    def _write(self, files: Mapping[str, Any]) -> None: ...


def bisect_commit(
    inv: Investigation, factor: Factor, room: int, doc: dict[str, Any]
) -> dict[str, Any] | None:
    """Step 3: bisect the commit between GOOD's and BAD's within `room` cells; its answer
    (None when the room is too small, said in `doc`)."""
    if room < 4:
        doc["notes"].append(
            f"the commit carries the change, but {room} cell(s) of the budget are left: "
            "bisect with `orch bisect` (or --budget more)"
        )
        return None
    inv.out(
        f"step 3: the commit carries it; bisect {factor.shown(factor.good)}.."
        f"{factor.shown(factor.bad)}"
    )
    base = inv._cell(inv.bad.record.cell)
    requested = (inv.bad.record.cell.get("repo") or {}).get("requested")
    commit_axes = frozenset(k for k, v in base.axes.items() if v == requested)
    refs: dict[str, dict[str, Any]] = {}
    for key, ref in (("good", str(factor.good)), ("bad", str(factor.bad))):
        pinned = pin_revision(base, inv.inventory, ref, key_path=key)
        if pinned is not None and pinned.sha is not None:
            refs[ref] = pinned.to_json()
    files = [p for p in inv.bad.run.playbook_files if p.is_file()]
    bisect_run = doc.get("bisect_run")
    job = Bisection(
        BisectSetup(
            base=base,
            host=inv.inventory.hosts[inv.host],
            inventory=inv.inventory,
            good=str(factor.good),
            bad=str(factor.bad),
            metric=inv.metric,
            results_dir=inv.request.results_dir,
            playbook_name=f"investigate-bisect-{inv._playbook()}",
            playbook_files=files,
            playbook_dir=inv.bad.run.path / "playbook",
            argv=list(inv.request.argv),
            commit_axes=commit_axes,
            refs=refs,
        ),
        run_id=bisect_run,
    )

    def log(msg: str) -> None:
        inv.out(f"  bisect: {msg}")
        if job.run_id and doc.get("bisect_run") != job.run_id:
            # said as soon as it exists: a resume continues this bisect, not a new one
            doc["bisect_run"] = job.run_id
            inv._write({INVESTIGATION_JSON: {**doc, "status": "bisecting"}})

    job.log = log
    job.execute()
    doc["bisect_run"] = job.run_id
    inv.spent += len(job.cells)
    return job.doc
