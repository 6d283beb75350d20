"""The run's own record in its bundle: plan.json, inventory.json and run.json.

`Run` (execute/apply/run.py) runs the hosts' queues; this keeps what the bundle says about the
run as a whole, rewritten after each outcome so that a controller killed at any point leaves a
run.json a resume can trust. A resume reads the earlier record first and keeps what other Runs
wrote into the same bundle (bisect adds one-cell Runs to one bundle).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator import __version__
from orchestrator.cell import Cell
from orchestrator.config.host import Host, Inventory
from orchestrator.execute.apply.outcomes import ApplyOptions, CellOutcome
from orchestrator.execute.machine import machine_id
from orchestrator.execute.transport.base import SchedulerJob
from orchestrator.results.bundle import BundleWriter
from orchestrator.results.layout import (
    CELL_JSON,
    CELLS_DIR,
    INVENTORY_JSON,
    PLAN_JSON,
    PLAYBOOK_DIR,
    RUN_JSON,
)
from orchestrator.runner.protocol import SCHEMA_VERSION
from orchestrator.secrets.redact import (
    REDACTED,
    cell_json_by_name,
    hide_secret_extra_vars,
    redact_mapping,
    redact_playbook_copy,
)
from orchestrator.secrets.values import scrub

RUN_SCHEMA_VERSION = 1
PROTOCOL_VERSION = SCHEMA_VERSION  # the runner protocol's, from the runner package itself


class RunRecord:
    """What one `Run` writes about itself: the plan, the inventory and run.json.

    `outcomes` and `lock` are the Run's own: the Run records each outcome under `lock`, and
    run.json is written from the same dict under the same lock.
    """

    def __init__(
        self,
        *,
        writer: BundleWriter,
        playbook_name: str,
        playbook_files: Sequence[Path],
        playbook_dir: Path,
        inventory: Inventory,
        cells: Sequence[Cell],
        options: ApplyOptions,
        secrets: Sequence[str],
        outcomes: dict[str, CellOutcome],
        lock: threading.Lock,
    ) -> None:
        self.writer = writer
        self.playbook_name = playbook_name
        self.inventory = inventory
        self.cells = list(cells)
        self.options = options
        self.secrets = secrets
        self.outcomes = outcomes
        self.lock = lock
        self.secret_names = sorted({n for c in self.cells for n in c.secrets})
        self.started = time.time()
        self.playbook_files = list(playbook_files)
        self.playbook_dir = playbook_dir
        # The resumed bundle's run.json as it was (read by `write_start`); {} for a new run.
        self.previous: dict[str, Any] = {}
        self.slurm_jobs: dict[str, dict[str, dict[str, Any]]] = {}  # host -> job name -> job

    def write_start(self) -> None:
        """The playbook copies, plan.json, inventory.json and a run.json saying "running"."""
        if self.options.resume:
            self.previous = self.writer.read_json(RUN_JSON) or {}
        else:
            copies = self.writer.copy_playbook_files(self.playbook_files, self.playbook_dir)
            # Every layer's value under a secret name, not only the one the run used.
            redact_playbook_copy(self.writer.path / PLAYBOOK_DIR, copies, self.secret_names)
        plan = [scrub(cell_json_by_name(c), self.secrets) for c in self.cells]
        hosts = {
            name: scrub(redact_mapping(_host_json(h), self.secret_names), self.secrets)
            for name, h in self.inventory.hosts.items()
            if any(name in c.hosts for c in self.cells)
        }
        if self.options.resume:
            # A resumed bundle may hold cells of other Runs (bisect adds one-cell Runs to one
            # bundle): keep what they recorded, this Run's version of a cell wins.
            ours = {c["id"] for c in plan}
            earlier = (self.writer.read_json(PLAN_JSON) or {}).get("cells", [])
            plan = [c for c in earlier if c.get("id") not in ours] + plan
            hosts = {**(self.writer.read_json(INVENTORY_JSON) or {}).get("hosts", {}), **hosts}
        self.writer.write_json(PLAN_JSON, {"cells": plan})
        self.writer.write_json(INVENTORY_JSON, {"source": self.inventory.source, "hosts": hosts})
        self.write("running")

    def recorded_cell(self, cell: Cell) -> Cell:
        """`cell` as the bundle records it: secret env values and every known secret hidden.

        Scoring a cell against its redacted captures needs the declared side redacted alike:
        a secret server arg (`--api-key`) the server reports back is `***REDACTED***` in both.
        """
        try:
            return Cell.model_validate(scrub(cell_json_by_name(cell), self.secrets))
        except ValidationError:  # a secret equal to a typed value (a Literal): compare as is
            return cell

    def merged_cells(self) -> dict[str, Any]:
        """Every cell of the bundle: earlier Runs' entries, then this Run's outcomes."""
        cells = dict(self.previous.get("cells", {}))
        cells.update({cid: o.to_json() for cid, o in self.outcomes.items()})
        for c in self.cells:
            cells.setdefault(c.id, {"host": c.host, "status": "pending"})
        return cells

    def write(self, status: str) -> None:
        """run.json now: `status` is "running" until the run ends."""
        with self.lock:
            cells = self.merged_cells()
            doc = {
                "orch_version": __version__,
                "protocol_version": PROTOCOL_VERSION,
                "run_id": self.writer.run_id,
                # by name first: a short secret (-e my_secret=xy7) is no value a sweep finds
                "argv": scrub(
                    hide_secret_extra_vars(self.options.argv, self.secret_names, REDACTED),
                    self.secrets,
                ),
                "playbook": self.playbook_name,
                "started": self.previous.get("started", _iso(self.started)),
                "resumed": [*self.previous.get("resumed", []), _iso(self.started)]
                if self.options.resume
                else [],
                "finished": _iso(time.time()) if status != "running" else None,
                "status": status,
                "hosts": sorted({*self.previous.get("hosts", []), *(c.host for c in self.cells)}),
                # The machine that made the bundle (a resume keeps it): replay asks before
                # running a bundle made elsewhere, and one without the record counts as such.
                "machine_id": self.previous.get("machine_id")
                if self.options.resume
                else machine_id(),
                "host_key_checking": {
                    **self.previous.get("host_key_checking", {}),
                    **{
                        h: self.inventory.hosts[h].host_key_checking
                        for h in {c.host for c in self.cells}
                    },
                },
                "cells": cells,
                **self._slurm_json(),
                **self.options.extra_run_fields,
            }
            self.writer.write_json(RUN_JSON, doc)

    def _slurm_json(self) -> dict[str, Any]:
        """run.json's `slurm_jobs` (the Slurm executor only): every job per host, a resume's
        earlier ones kept."""
        jobs = {h: list(j.values()) for h, j in self.slurm_jobs.items()}
        earlier = self.previous.get("slurm_jobs")
        if isinstance(earlier, dict):
            jobs = {h: [*earlier.get(h, []), *jobs.get(h, [])] for h in {*earlier, *jobs}}
        return {"slurm_jobs": jobs} if jobs else {}

    def slurm_job(self, host_name: str, job: SchedulerJob) -> None:
        """A host's Slurm job changed (queued, running): record it at once."""
        with self.lock:
            self.slurm_jobs.setdefault(host_name, {})[job.name] = job.as_json()
        self.write("running")

    def earlier_slurm_jobs(self, host_name: str) -> list[dict[str, Any]]:
        """The Slurm jobs the interrupted run recorded for this host ([] when none)."""
        earlier = self.previous.get("slurm_jobs")
        recorded = earlier.get(host_name) if isinstance(earlier, dict) else None
        return recorded if isinstance(recorded, list) else []

    def settled_slurm_jobs(self, host_name: str, settled: list[dict[str, Any]]) -> None:
        """How each of the interrupted run's jobs for this host ended, in run.json at once."""
        with self.lock:
            self.previous["slurm_jobs"][host_name] = settled
        self.write("running")

    def trust_cell_files(self, done: set[str]) -> None:
        """A finished cell's own cell.json beats run.json's entry for it.

        A controller killed between installing a cell and rewriting run.json left the entry
        "pending"; the resume skips the cell, so its status must come from the cell itself.
        """
        cells = self.previous.setdefault("cells", {})
        hosts = {c.id: c.host for c in self.cells}
        for cid in done:
            doc = self.writer.read_json(f"{CELLS_DIR}/{cid}/{CELL_JSON}")
            if not isinstance(doc, dict) or not isinstance(cells, dict):
                continue
            entry = cells.setdefault(cid, {"host": hosts.get(cid, "")})
            for key in ("status", "reason", "failed_step"):
                if key in doc:
                    entry[key] = doc[key]

    def all_outcomes(self) -> dict[str, CellOutcome]:
        """This invocation's outcomes, and every earlier one of a resumed run (a resume with
        a narrower --limit still answers for the whole run)."""
        outcomes: dict[str, CellOutcome] = {}
        for cid, entry in self.previous.get("cells", {}).items():
            if cid not in self.outcomes and isinstance(entry, dict):
                outcomes[cid] = CellOutcome(
                    cid,
                    str(entry.get("host", "")),
                    str(entry.get("status", "")),
                    entry.get("reason"),
                    entry.get("failed_step"),
                    entry.get("seconds"),
                    earlier=True,
                )
        outcomes.update(self.outcomes)
        return outcomes

    def all_passed(self) -> bool:
        """The run passed when every cell it holds passed, this Run's and earlier ones alike."""
        with self.lock:
            cells = self.merged_cells()
        return all(entry.get("status") == "passed" for entry in cells.values())


def _host_json(host: Host) -> dict[str, Any]:
    return {
        "name": host.name,
        "connection": host.connection,
        "address": host.target,
        "port": host.port,
        "user": host.user,
        "python": host.python,
        "groups": list(host.groups),
        "host_key_checking": host.host_key_checking,
        "vars": dict(host.vars),
    }


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))
