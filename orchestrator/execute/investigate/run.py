"""`orch investigate GOOD BAD`, run: re-measure both now, then BAD with one declared factor at a
time set back to GOOD's value, then bisect the commit when it carries the change.

Every experiment is a cell in one run folder (its own bundle per experiment, resumable as
`orch apply --resume` is: a finished cell is read back, never measured again). The reasoning is
analyze/investigate's; this module runs cells and the bisect, and writes investigation.json and
investigation.md into the run folder.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.analyze.diff.profile import grown
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.investigate.document import (
    bisect_summary,
    host_facts,
    outcome_doc,
    positive,
    what_changed,
)
from orchestrator.analyze.investigate.factors import declared_factors, relabeled, swapped
from orchestrator.analyze.investigate.html import render_html
from orchestrator.analyze.investigate.report import render_markdown, verdict_sentence
from orchestrator.analyze.investigate.verdicts import Finding, Reproduction, judge, reproduction
from orchestrator.cell import Cell
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.patterns import select_hosts_checked
from orchestrator.errors import BundleError, InputError
from orchestrator.execute.apply.outcomes import ApplyOptions
from orchestrator.execute.apply.run import Run
from orchestrator.execute.audit.stopping import with_audit_stop
from orchestrator.execute.investigate.bisecting import bisect_commit
from orchestrator.execute.investigate.experiments import (
    EXPERIMENT_REPEATS,
    LOOKS,
    REFERENCE_REPEATS,
    Experiment,
    holm_family,
    with_profile,
    with_repeats,
)
from orchestrator.execute.investigate.looks import (
    BAD_NOW,
    BISECT_ALLOWANCE,
    GOOD_NOW,
    look_again,
    plan_verdict_lines,
    together,
)
from orchestrator.execute.investigate.sides import (
    adapter_changes,
    deciding_metric,
    factor_lines,
    open_side,
    plan_notes,
)
from orchestrator.execute.investigate.starts import start_ids, start_unit, with_starts
from orchestrator.execute.replay import inventory_from_bundle, restore_secrets
from orchestrator.results.bundle import BundleWriter
from orchestrator.results.documents import read_json
from orchestrator.results.layout import (
    CELL_JSON,
    CELLS_DIR,
    INVESTIGATION_HTML,
    INVESTIGATION_JSON,
    INVESTIGATION_MD,
)
from orchestrator.results.read import open_run
from orchestrator.secrets.values import extra_vars_in_argv, secrets_of_run

Echo = Callable[[str], None]


@dataclass(frozen=True)
class InvestigateRequest:
    """What `orch investigate` was asked."""

    good: str
    bad: str
    results_dir: Path
    inventory: Sequence[Path] = ()
    limit: str | None = None
    metric: str | None = None
    tolerance: float = 0.03
    budget: int | None = None
    resume: str | None = None
    bisect: bool = True
    argv: Sequence[str] = ()
    # the between-start sd on the log scale (--start-sd): each cell is then one server start,
    # and repeats inside it cannot show this part of the noise
    start_sd: float | None = None
    # server starts each cell runs (--starts); None: DEFAULT_STARTS unless the sd is known
    starts: int | None = None


class Investigation:
    """One `orch investigate`, backed by one run folder."""

    def __init__(self, request: InvestigateRequest, out: Echo) -> None:
        self.request = request
        self.out = out
        self.good = open_side(request.good, request.results_dir, "GOOD")
        self.bad = open_side(request.bad, request.results_dir, "BAD")
        self.metric = request.metric or deciding_metric(self.good.evidence, self.bad.evidence)
        for side, name in ((self.good, "GOOD"), (self.bad, "BAD")):
            side.values = positive(side.evidence.values(self.metric))
            if len(side.values) < 2:
                raise InputError(
                    f"{name} has {len(side.values)} value(s) of {self.metric}; an investigation "
                    "needs the noise of 2 repeats or more",
                    hint="pick cells measured with repeats >= 2, or --metric another metric",
                )
        self.inventory = (
            load_inventory(request.inventory)
            if request.inventory
            else inventory_from_bundle(self.bad.run)
        )
        self.host = self._host()
        self.unit = start_unit(
            self.metric,
            [("GOOD", self.good.evidence.metrics), ("BAD", self.bad.evidence.metrics)],
            given=request.start_sd,
            starts=request.starts,
        )
        # each judged label's server start per value, where its cells ran several starts
        self.start_ids: dict[str, list[str]] = {}
        self.factors = declared_factors(self.good.record.cell, self.bad.record.cell)
        self.run_id: str | None = None
        if request.resume:
            self.run_id = open_run(request.resume, request.results_dir).path.name
        self.cells: list[Cell] = []
        self.spent = 0
        self.family = 0  # Holm's m, declared once the experiments that fit the budget are known
        self.bad_now: list[float] | None = None  # BAD now's values, measured again at step 2c

    def _host(self) -> str:
        if self.request.limit:
            picked = select_hosts_checked(self.inventory, self.request.limit, key_path="--limit")
            if len(picked) != 1:
                raise InputError(
                    f"--limit picks {len(picked)} hosts; an investigation measures on one",
                    hint="name one host: every experiment must share it",
                )
            return picked[0]
        host = str(self.bad.record.cell.get("host", ""))
        if host not in self.inventory.hosts:
            raise InputError(
                f"BAD ran on {host!r}, which this inventory does not have",
                hint="give -i with that host, or --limit to pick another host",
            )
        return host

    # -- the plan ------------------------------------------------------------------------------

    def _cell(self, data: Mapping[str, Any]) -> Cell:
        cell = restore_secrets(dict(data))
        return cell if cell.host == self.host else cell.model_copy(update={"host": self.host})

    def reference_experiments(self) -> list[Experiment]:
        """GOOD and BAD as recorded, measured again now on the investigation's host, with
        enough fixed repeats for the rank test (every experiment is judged against them)."""
        good = with_profile(self._repeats(self.good.record.cell, REFERENCE_REPEATS))
        bad = with_profile(self._repeats(self.bad.record.cell, REFERENCE_REPEATS))
        return [
            Experiment(GOOD_NOW, self._cell(relabeled(good, "good-now"))),
            Experiment(BAD_NOW, self._cell(relabeled(bad, "bad-now"))),
        ]

    def factor_experiments(self, bad_now: CellEvidence | None = None) -> list[Experiment]:
        """BAD with one testable factor set back to GOOD's value each, the commit first; with
        BAD-now measured, each stops once the sequential test against it decides."""
        out = []
        base = self._repeats(self.bad.record.cell, EXPERIMENT_REPEATS)
        for f in self.factors:
            if f.testable:
                label = f"{f.label}: {f.shown(f.bad)} -> {f.shown(f.good)}"
                out.append(Experiment(label, self._stopping(swapped(base, [f]), bad_now), (f,)))
        return out

    def _repeats(self, cell: Mapping[str, Any], repeats: int) -> dict[str, Any]:
        """A recorded cell measuring `repeats` times over the unit's server starts."""
        return with_starts(with_repeats(cell, repeats), self.unit.starts)

    def _stopping(self, data: Mapping[str, Any], bad_now: CellEvidence | None) -> Cell:
        cell = self._cell(data)
        # the audit's stop counts repeats as independent and may end before the last start
        if bad_now is None or self.unit.measures:
            return cell
        return with_audit_stop(cell, bad_now, tolerance=self.request.tolerance)

    def budget(self) -> int:
        """--budget, else GOOD and BAD now, every experiment, a second look at each (BAD now
        and an inconclusive one measured again), one of all factors together, and a bisect."""
        if self.request.budget is not None:
            return self.request.budget
        testable = [f for f in self.factors if f.testable]
        bisect = BISECT_ALLOWANCE if any(f.kind == "commit" for f in testable) else 0
        return 3 + 2 * len(testable) + (1 if len(testable) > 1 else 0) + bisect

    def planned_family(self) -> int:
        """Holm's family size, fixed before anything runs: the single-factor experiments the
        budget holds, and one of several together."""
        room = max(self.budget() - 2, 0)
        return holm_family(min(len(self.factor_experiments()), room))

    def cell_seconds(self) -> float:
        """A cell's expected seconds: the median of GOOD's and BAD's recorded durations."""
        seen = [
            float(s)
            for side in (self.good, self.bad)
            if isinstance(s := side.evidence.cell_json.get("seconds"), int | float)
        ]
        return statistics.median(seen) if seen else math.nan

    def plan_lines(self) -> list[str]:
        """What it would run, in order, with the budget and the expected time; and what stops
        or hinders it (sides.plan_notes, adapters that differ, a budget too small)."""
        each = self.cell_seconds()
        good_cell, bad_cell = self.good.record.cell, self.bad.record.cell
        lines = [
            f"investigate {self.metric} on {self.host}: GOOD {self.good.record.id} "
            f"({self.good.run.run_id}), BAD {self.bad.record.id} ({self.bad.run.run_id})",
        ]
        lines += plan_notes(self.good, self.bad, self.request.tolerance)
        lines += factor_lines(good_cell, bad_cell, self.factors)
        if adapter_changes(good_cell, bad_cell):
            return lines  # no experiment: a run is refused (sides.refuse_adapter_change)
        lines.append("experiments:")
        planned = self.reference_experiments() + self.factor_experiments()
        for i, e in enumerate(planned, 1):
            lines.append(f"  {i}. {e.label}")
        lines.append(
            "  then, when no single factor explains the change, all of them together; when the "
            "commit carries it, a bisect between the two commits"
        )
        budget = self.budget()
        eta = f", about {budget * each / 60:.0f} min at {each:.0f} s a cell" if each == each else ""
        lines.append(f"budget: {budget} cells at most{eta} (--budget N)")
        if budget < len(planned):
            left = planned[budget:]
            lines.append(
                f"note: the budget is too small for the {len(planned)} experiments listed: "
                f"{len(left)} will not run ({', '.join(e.label for e in left)}); "
                f"--budget {len(planned)} runs them all"
            )
        lines += plan_verdict_lines(self.planned_family(), self.request.tolerance)
        lines.append(self.unit.plan_line(budget))
        return lines

    def _playbook(self) -> str:
        return str((self.bad.run.run or {}).get("playbook") or "cells")

    # -- running -------------------------------------------------------------------------------

    def _run(self, experiments: Sequence[Experiment]) -> dict[str, CellEvidence | None]:
        for e in experiments:
            if e.cell.id not in {c.id for c in self.cells}:
                self.cells.append(e.cell)
        playbook_dir = self.bad.run.path / "playbook"
        files = [p for p in self.bad.run.playbook_files if p.is_file()]
        run = Run(
            playbook_name=f"investigate-{self._playbook()}",
            playbook_files=files,
            playbook_dir=playbook_dir,
            inventory=self.inventory,
            cells=self.cells,
            secrets=secrets_of_run(
                self.cells, self.inventory, *extra_vars_in_argv(self.request.argv), files=files
            ),
            options=ApplyOptions(
                results_dir=self.request.results_dir,
                run_id=self.run_id,
                resume=self.run_id is not None,
                argv=self.request.argv,
                extra_run_fields={
                    "investigate": {
                        "good": f"{self.good.run.run_id}/{self.good.record.id}",
                        "bad": f"{self.bad.run.run_id}/{self.bad.record.id}",
                    }
                },
            ),
        )
        self.run_id = run.run_id
        run.execute()
        self.spent = len(self.cells)
        return {e.label: self._measured(e.cell.id) for e in experiments}

    def _measured(self, cell_id: str) -> CellEvidence | None:
        path = self.request.results_dir / str(self.run_id) / CELLS_DIR / cell_id
        if not (path / CELL_JSON).is_file():
            return None
        evidence = CellEvidence.load(path)
        return evidence if positive(evidence.values(self.metric)) else None

    def _values(self, evidence: CellEvidence | None) -> list[float] | None:
        return positive(evidence.values(self.metric)) if evidence else None

    def _note_starts(self, label: str, evidence: CellEvidence | None) -> None:
        """Add the server start of each of `evidence`'s values to `label`'s (its values are
        appended in the same order where a second cell pools with the first)."""
        values = self._values(evidence)
        if evidence is None or not values:
            return
        ids = start_ids(evidence.metrics, self.metric, evidence.id)
        # values and ids must pair up; else the label is judged on repeats, as before
        if ids is None or len(ids) != len(values):
            ids = [f"{evidence.id}/?"] * len(values)
        self.start_ids.setdefault(label, []).extend(ids)

    def execute(self) -> dict[str, Any]:
        """Investigate; returns the report's document (also written into the run folder)."""
        tolerance = self.request.tolerance
        doc: dict[str, Any] = self._doc_head()
        if self.run_id is not None:  # resumed: the bisect it had begun, if any
            try:
                earlier = read_json(self.request.results_dir / self.run_id / INVESTIGATION_JSON)
            except BundleError:
                earlier = None
            if isinstance(earlier, dict) and isinstance(earlier.get("bisect_run"), str):
                doc["bisect_run"] = earlier["bisect_run"]
        recorded = reproduction(self.good.values, self.bad.values, None, None, tolerance=tolerance)
        if recorded.outcome == "not_significant":
            return self._finish(doc, recorded, [], None)
        budget = self.budget()
        if budget < 2:
            raise InputError(f"--budget {budget}: re-measuring GOOD and BAD takes 2 cells")
        self.out(f"step 1: GOOD and BAD measured again on {self.host}")
        now = self._run(self.reference_experiments())
        good_now, bad_now = self._values(now[GOOD_NOW]), self._values(now[BAD_NOW])
        self.bad_now = bad_now
        for label in (GOOD_NOW, BAD_NOW):
            self._note_starts(label, now[label])
        if good_now is None or bad_now is None:
            doc["notes"].append("GOOD or BAD could not be measured again; see the run's cells")
            return self._finish(doc, recorded, [], None)
        state = reproduction(
            self.good.values, self.bad.values, good_now, bad_now, tolerance=tolerance
        )
        self.out(f"  {state.line(self.metric)}")
        doc["cells"] = {label: self._cell_ref(now[label]) for label in (GOOD_NOW, BAD_NOW)}
        profiles = [e.profile if e else {} for e in (now[GOOD_NOW], now[BAD_NOW])]
        doc["phase_grown"] = grown(*profiles)
        if doc["phase_grown"]:
            self.out(f"  the phase that grew, GOOD now -> BAD now: {doc['phase_grown']}")
        if state.outcome != "reproduces":
            then, later = (
                (self.good.evidence, now[GOOD_NOW])
                if state.outcome == "host_changed"
                else (self.bad.evidence, now[BAD_NOW])
            )
            doc["changed"] = what_changed(then, later) if later else []
            return self._finish(doc, state, [], None)
        experiments = self.factor_experiments(now[BAD_NOW])
        room = budget - 2
        doc["not_tested"] = [e.label for e in experiments[room:]]
        experiments = experiments[: max(room, 0)]
        self.family = holm_family(len(experiments))
        doc["holm_family"], doc["looks"] = self.family, LOOKS
        findings: list[Finding] = []
        if experiments:
            self.out(f"step 2: {len(experiments)} controlled experiment(s), one factor each")
            measured = self._run(experiments)
            for label, evidence in measured.items():
                doc["cells"][label] = self._cell_ref(evidence)
                self._note_starts(label, evidence)
            samples: dict[str, Sequence[float] | None] = {
                k: self._values(v) for k, v in measured.items()
            }
            findings = self._judge(bad_now, good_now, samples)
            for f in findings:
                self.out(f"  {f.line()}")
            findings, samples = look_again(self, findings, experiments, samples, now, doc)
            findings = together(self, findings, experiments, samples, now, doc)
        result = None
        commit = next((e for e in experiments if e.factors[0].kind == "commit"), None)
        carried = (
            any(f.label == commit.label and f.verdict in ("explains", "partly") for f in findings)
            if commit
            else False
        )
        if carried and commit is not None and self.request.bisect:
            result = bisect_commit(self, commit.factors[0], budget - self.spent, doc)
        return self._finish(doc, state, findings, result)

    def _judge(
        self,
        bad_now: Sequence[float],
        good_now: Sequence[float],
        samples: Mapping[str, Sequence[float] | None],
        look: Mapping[str, int] | None = None,
    ) -> list[Finding]:
        return judge(
            bad_now,
            good_now,
            samples,
            tolerance=self.request.tolerance,
            family=self.family,
            looks=LOOKS,
            look=look,
            start_sd=self.unit.judged_sd,
            starts=self.unit.judged_starts(self.start_ids),
        )

    # -- the report ----------------------------------------------------------------------------

    def _doc_head(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "good": f"{self.good.run.run_id}/{self.good.record.id}",
            "bad": f"{self.bad.run.run_id}/{self.bad.record.id}",
            "metric": self.metric,
            "host": self.host,
            "tolerance": self.request.tolerance,
            "start_sd": self.unit.sd,
            "start_unit": self.unit.as_dict(),
            "factors": [asdict(f) | {"label": f.label} for f in self.factors],
            "host_facts": host_facts(self.good.evidence, self.bad.evidence),
            "cells": {},
            "changed": [],
            "not_tested": [],
            "notes": [],
        }

    def _cell_ref(self, evidence: CellEvidence | None) -> dict[str, Any] | None:
        if evidence is None:
            return None
        return {
            "id": evidence.id,
            "path": f"{CELLS_DIR}/{evidence.id}",
            "n": len(positive(evidence.values(self.metric))),
        }

    def _finish(
        self,
        doc: dict[str, Any],
        state: Reproduction,
        findings: Sequence[Finding],
        bisect: dict[str, Any] | None,
    ) -> dict[str, Any]:
        doc.update(outcome_doc(state, findings, self.metric))
        if bisect is not None:
            doc["bisect"] = bisect_summary(bisect, doc.get("bisect_run"))
        doc["run"] = self.run_id
        doc["spent_cells"] = self.spent
        doc["verdict"] = verdict_sentence(doc)
        self._write(
            {
                INVESTIGATION_JSON: doc,
                INVESTIGATION_MD: render_markdown(doc),
                INVESTIGATION_HTML: render_html(doc),
            }
        )
        return doc

    def _write(self, files: Mapping[str, Any]) -> None:
        """Files into the investigation's folder (text as is, the rest as JSON), then its
        manifest made again, once."""
        if self.run_id is None:
            return
        writer = BundleWriter(self.request.results_dir, self.run_id, new=False)
        for name, data in files.items():
            if isinstance(data, str):
                writer.write_file(name, data)
            else:
                writer.write_json(name, data)
        writer.finalize()
