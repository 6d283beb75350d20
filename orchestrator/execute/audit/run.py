"""`orch audit`, run: the manifest check, a fresh snapshot of every host against the record,
and (with `--rerun`) the bundle's own cells run again and compared.

The judgements are `verdicts.py`'s; this module reaches the hosts. Each line is handed to
`out` (stdout) or `err` (stderr) as it is known, so a long rerun shows the checks before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from orchestrator.analyze.diff.render import render_diff
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.config.host import Inventory
from orchestrator.config.inventory.load import load_inventory
from orchestrator.errors import InputError
from orchestrator.execute.audit.stopping import start_noise_line, stop_line, with_audit_stop
from orchestrator.execute.audit.verdicts import (
    deciding_lines,
    host_drift,
    integrity,
    recorded_probe_args,
    render_reproductions,
    reproduction,
)
from orchestrator.execute.facts import probe_host
from orchestrator.execute.replay import inventory_from_bundle, pick_cells, retarget, run_recorded
from orchestrator.results.documents import is_cell_dir
from orchestrator.results.layout import CELLS_DIR
from orchestrator.results.read import RunBundle, open_run

Echo = Callable[[str], None]


@dataclass
class AuditRequest:
    """What `orch audit` was asked."""

    ref: str
    results_dir: Path
    inventory: Sequence[Path]
    drift: bool
    rerun: bool
    selector: str | None
    tolerance: float  # allowed relative change, 0.05 for 5%
    argv: Sequence[str]


def audit(request: AuditRequest, out: Echo, err: Echo) -> bool:
    """Run every check asked for, printing as it goes; True only when every one passed."""
    if is_cell_dir(Path(request.ref)):
        raise InputError(
            f"{request.ref}: audit takes a run, not a cell", hint="pass the run directory"
        )
    run = open_run(request.ref, request.results_dir)
    ok = _integrity(run, out)
    inv = load_inventory(request.inventory) if request.inventory else inventory_from_bundle(run)
    if request.drift:
        ok &= _drift(run, inv, out, err)
    if request.rerun:
        ok &= _reproduction(run, inv, request, out)
    out(f"audit: {'PASSED' if ok else 'FAILED'}")
    return ok


def _integrity(run: RunBundle, out: Echo) -> bool:
    manifest = integrity(run.path, (run.run or {}).get("status"))
    out(f"integrity: {'ok' if manifest.ok else 'FAILED'} ({manifest.checked} files)")
    for label, items in (
        ("changed", manifest.mismatched),
        ("missing", manifest.missing),
        ("extra", manifest.extra),
    ):
        for item in items:
            out(f"  {label}: {item}")
    return manifest.ok


def _drift(run: RunBundle, inv: Inventory, out: Echo, err: Echo) -> bool:
    ok = True
    for name in list((run.run or {}).get("hosts") or []):
        if name not in inv.hosts:
            err(f"drift {name}: not in the inventory; give -i")
            ok = False
            continue
        repo, python = recorded_probe_args(run, name)
        now = probe_host(inv.hosts[name], repo=repo, python=python)
        drift = host_drift(run, name, now)
        if drift.error:
            out(f"drift {name}: cannot check: {drift.error}")
        elif not drift.drifted:
            out(f"drift {name}: none (code, packages, system, hardware as recorded)")
        else:
            out(f"drift {name}: DRIFTED")
            if drift.diff is not None:
                out(render_diff(drift.diff, "text"))
            if any(s.name == "code" and s.differs for s in drift.sections):
                out(
                    "  note: the checkout is shared by every run on this host with the same "
                    "repo dest; a later orch apply, replay or bisect moves its HEAD too"
                )
        ok &= not drift.drifted
    return ok


def _reproduction(run: RunBundle, inv: Inventory, request: AuditRequest, out: Echo) -> bool:
    picked = retarget(pick_cells(run, request.selector), inv, None)
    recorded = {c.id: CellEvidence.load(run.cells[c.id].path) for c in picked if c.id in run.cells}
    cells = [
        with_audit_stop(cell, recorded[cell.id], tolerance=request.tolerance)
        if cell.id in recorded
        else cell
        for cell in picked
    ]
    told = [
        start_noise_line(cell, recorded[cell.id])
        for cell in cells
        if cell.id in recorded and cell.bench.settle and cell.bench.settle.against
    ]
    if told:  # before the rerun: which start-to-start spread the stops are told
        out("rerun stops, start-to-start spread:")
        for line in told:
            out(line)
    outcome = run_recorded(
        run,
        cells,
        inv,
        results_dir=request.results_dir,
        argv=request.argv,
        provenance={"audit_of": run.run_id},
    )
    verdicts = []
    for cell in cells:
        new_dir = outcome.path / CELLS_DIR / cell.id
        if cell.id not in recorded or not new_dir.is_dir():
            continue
        rerun = CellEvidence.load(new_dir)
        verdicts.append(reproduction(recorded[cell.id], rerun, tolerance=request.tolerance))
    headers = ["cell", "metric", "recorded", "rerun", "ratio", "reproduces"]
    out(tabulate(render_reproductions(verdicts), headers=headers))
    for line in deciding_lines(verdicts):
        out(line)
    stops = [
        said
        for cell in cells
        if (said := stop_line(cell.id, outcome.path / CELLS_DIR / cell.id, request.tolerance))
    ]
    if stops:
        out("repeats:")
        for said in stops:
            out(said)
    out(f"rerun bundle: {outcome.path}")
    good = bool(verdicts) and all(v.reproduces for v in verdicts)
    out(f"reproduction: {'ok' if good else 'FAILED'}")
    return good
