"""`orch audit`: is this bundle intact, are its hosts still as recorded, does it reproduce?

Three questions, each answered with the machinery the rest of orch uses: the manifest check,
the diff engine (`orch diff`) over a fresh snapshot against the recorded one, and a rerun of the
bundle's own rendered cells compared metric by metric with `orch diff`'s noise-aware test
(`diff_model.metric_deltas`): a metric fails to reproduce when it moved past the tolerance AND
the test calls the move significant, never on the tolerance alone (unless a side has a single
repeat, which shows no noise to judge by).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.analyze.diff.cells import diff_cells
from orchestrator.analyze.diff.model import (
    ONE_START,
    REPEATS_NOTE,
    STARTS_NOTE,
    CellDiff,
    Section,
    deciding_metrics,
    metric_deltas,
)
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.results.layout import MANIFEST
from orchestrator.results.manifest import ManifestReport, verify_manifest
from orchestrator.results.read import RunBundle
from orchestrator.results.records import Snapshot
from orchestrator.runner.probe.shape import ABSENT

# Sections of the diff that say a host drifted; metrics and flags cannot differ here.
DRIFT_SECTIONS = ("code", "packages", "system", "hardware")
# What `deciding_metrics` found them from, for people.
DECIDING_FROM = {
    "expect": "the metrics under expect:",
    "headline": "the headline throughput metric, as the cell sets no expect:",
    "all": "every metric measured: no expect: and no throughput metric",
}


@dataclass
class HostDrift:
    """What differs on one host between the run's record and now."""

    host: str
    sections: list[Section]
    error: str | None = None
    diff: CellDiff | None = None  # the drift sections as `orch diff` renders them

    @property
    def drifted(self) -> bool:
        """True when the host could not be checked or any drift section differs."""
        return self.error is not None or any(s.differs for s in self.sections)


@dataclass
class MetricReproduction:
    """One metric of one cell: recorded vs rerun."""

    metric: str
    recorded_median: float
    rerun_median: float
    ratio: float | None
    within_tolerance: bool
    significant: bool
    method: str
    judged: bool = True  # counts toward the cell's verdict
    p_value: float | None = None
    p_adjusted: float | None = None  # Holm over the judged (or the other) metrics
    unstable: bool = False  # an outlying repeat or a high spread on either side
    cannot_reach: str | None = None  # the sizes' smallest p cannot reach alpha (`stats`)
    unit: str | None = None  # what the test counted: "3 v 3 starts", "repeats of one start"

    @property
    def reproduces(self) -> bool:
        """Not a significant change, as `orch diff` tests it (too few repeats for the exact
        test to reach alpha: never significant, and said). With a single repeat on a side
        there is no noise to test against: then within tolerance."""
        if self.method == "single":
            return self.within_tolerance
        return not self.significant


@dataclass
class CellReproduction:
    """A rerun cell's verdict."""

    cell_id: str
    status: str  # the rerun's status
    metrics: list[MetricReproduction] = field(default_factory=list)
    reason: str | None = None
    recorded_status: str | None = None
    ran: bool = False  # the rerun's runner finished the benchmark (runner status passed)
    deciding_from: str = ""  # `deciding_metrics`' source: expect, headline or all

    @property
    def reproduces(self) -> bool:
        """The rerun gave the recorded verdict and every judged metric reproduces.

        A cell that missed its expectation (failed by its verdict, not by its run) reproduces
        when it misses it again with the same numbers; a rerun that did not run never does.
        """
        judged = [m for m in self.metrics if m.judged]
        return self.same_verdict and bool(judged) and all(m.reproduces for m in judged)

    @property
    def same_verdict(self) -> bool:
        """Passed as recorded, or failed as recorded after a run that finished its benchmark."""
        recorded = self.recorded_status or "passed"
        return self.status == recorded and (self.status == "passed" or self.ran)


def integrity(run_dir: Path, status: str | None = None) -> ManifestReport:
    """Every file against MANIFEST.sha256: changed, missing and extra files.

    A finished run (`status` from run.json: passed, failed or interrupted alike) always wrote
    its manifest, so a missing one is a failed check, listed as missing, not a bad argument;
    only a run still in progress has none yet (BundleError).
    """
    if status not in (None, "running") and not (run_dir / MANIFEST).exists():
        return ManifestReport(missing=[MANIFEST])  # nothing can be checked without it
    return verify_manifest(run_dir)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _checked_out_at(evidence: CellEvidence) -> float:
    """When the cell pinned the repo (its `repo` step), else its latest step time; 0 unknown."""
    steps = _dict(evidence.cell_json.get("steps"))

    def times(step: Any) -> list[float]:
        step = _dict(step)
        return [float(step[k]) for k in ("start", "end") if isinstance(step.get(k), int | float)]

    repo = times(steps.get("repo"))
    if repo:
        return max(repo)
    return max((t for step in steps.values() for t in times(step)), default=0.0)


def _recorded_evidence(run: RunBundle, host: str) -> CellEvidence | None:
    """The cell that ran last on `host`: its repo state is the host's last known HEAD.

    By the time it checked out the repo, not by plan order: the controller runs a host's cells
    grouped by commit, so the last cell of the plan is often not the last one run, and its
    commit would read as drift on an untouched host.
    """
    found = [
        CellEvidence.load(rec.path, run_id=run.run_id)
        for rec in run.cells.values()
        if rec.host == host
    ]
    if not found:
        return None
    # max() keeps the first of equal keys: reversed() makes ties go to the later plan entry.
    return max(reversed(found), key=_checked_out_at)


def recorded_probe_args(run: RunBundle, host: str) -> tuple[str | None, str | None]:
    """The repo dir and the server's python the run's last snapshot on `host` looked at.

    A fresh snapshot must look at the same things, or every package would read as drift.
    """
    last = _recorded_evidence(run, host)
    if last is None:
        return None, None
    snap = Snapshot(last.snapshot_post or last.snapshot_pre)
    git, python = snap.git, snap.python
    repo = git.get("path") or (last.repo or {}).get("dest")
    return (
        str(repo) if repo else None,
        str(python.get("requested") or python.get("executable") or "") or None,
    )


def _host_state(
    run: RunBundle,
    ident: str,
    host: str,
    *,
    cell: dict[str, Any],
    repo: dict[str, Any],
    snapshot: dict[str, Any],
    run_id: str | None,
) -> CellEvidence:
    """A host's state as evidence the diff engine reads (a cell with only repo and snapshot)."""
    return CellEvidence(
        path=run.path,
        id=ident,
        host=host,
        axes={},
        status=None,
        reason=None,
        failed_step=None,
        cell=cell,
        cell_json={},
        repo=repo,
        server={},
        env_check={},
        snapshot_pre=snapshot,
        snapshot_post={},
        metrics={},
        captures={},
        run_id=run_id,
    )


def host_drift(run: RunBundle, host: str, now: Mapping[str, Any]) -> HostDrift:
    """Diff what the run recorded on `host` against a snapshot `now` (probe output)."""
    if ABSENT in now and len(now) <= 2:
        return HostDrift(host, [], error=f"cannot snapshot {host} now: {now[ABSENT]}")
    recorded = _recorded_evidence(run, host)
    facts = run.hosts.get(host) or {}
    git = Snapshot(now).git
    repo_then = recorded.repo if recorded else {}
    # A clone now at another commit this run measured was moved by a later run pinning it, not
    # by a pull: compare against that cell's repo state. A commit the run never used is drift.
    for rec in run.cells.values():
        if rec.host == host and git.get("head") and _dict(rec.repo).get("sha") == git["head"]:
            repo_then = _dict(rec.repo)
            break
    before = _host_state(
        run,
        f"{host}@run",
        host,
        cell=recorded.cell if recorded else {},
        repo=repo_then,
        snapshot=(recorded.snapshot_post or recorded.snapshot_pre) if recorded else facts,
        run_id=run.run_id,
    )
    repo_now: dict[str, Any] = {}
    if before.repo:
        # The probe gives `git status --porcelain` as a list of lines, repo.json as one text.
        porcelain = git.get("status_porcelain")
        if isinstance(porcelain, list):
            porcelain = "\n".join(str(line) for line in porcelain)
        repo_now = {
            "requested": before.repo.get("requested"),
            "sha": git.get("head"),
            "describe": git.get("describe"),
            "dirty": git.get("dirty"),
            "status_porcelain": porcelain,
            # what the runner did about a dirty tree is the run's policy, not the host's state
            "dirty_action": before.repo.get("dirty_action"),
        }
    after = _host_state(
        run, f"{host}@now", host, cell=before.cell, repo=repo_now, snapshot=dict(now), run_id=None
    )
    result = diff_cells(before, after)
    result.sections = [s for s in result.sections if s.name in DRIFT_SECTIONS]
    return HostDrift(host, result.sections, diff=result)


def reproduction(
    recorded: CellEvidence, rerun: CellEvidence, *, tolerance: float, alpha: float = 0.05
) -> CellReproduction:
    """Per metric: does the rerun's sample sit with the recorded one? The test is `orch diff`'s
    with the tolerance as its threshold; the verdict rests on `deciding_metrics(recorded)`."""
    deciding, source = deciding_metrics(recorded)
    out = CellReproduction(
        recorded.id,
        str(rerun.status),
        reason=rerun.reason,
        recorded_status=recorded.status,
        ran=rerun.cell_json.get("runner_status", rerun.status) == "passed",
        deciding_from=source,
    )
    deltas = metric_deltas(recorded, rerun, deciding, ratio_threshold=tolerance, alpha=alpha)
    for d in deltas:
        if d.median_a is None or d.median_b is None or d.metric not in recorded.metric_names:
            continue
        ratio = d.median_b / d.median_a if d.median_a else None
        out.metrics.append(
            MetricReproduction(
                d.metric,
                d.median_a,
                d.median_b,
                ratio,
                ratio is not None and abs(ratio - 1) <= tolerance,
                d.significant is not False,
                d.method or "single",
                judged=d.decides,
                p_value=d.p_value,
                p_adjusted=d.p_adjusted,
                unstable=d.unstable,
                cannot_reach=d.cannot_reach,
                unit=d.unit,
            )
        )
    return out


def render_reproductions(items: Sequence[CellReproduction]) -> list[list[str]]:
    """Rows for a table: cell, metric, recorded, rerun, ratio, verdict."""
    rows: list[list[str]] = []
    for item in items:
        if not item.metrics:
            rows.append([item.cell_id, "-", "-", "-", "-", f"NO ({item.status}: {item.reason})"])
        elif item.status != "passed" or item.recorded_status not in (None, "passed"):
            # the verdict, when it is not a plain pass: a missed expectation missed again is
            # reproduced; anything else is not
            verdict = "yes" if item.same_verdict else "NO"
            rows.append(
                [item.cell_id, "(status)", str(item.recorded_status), item.status, "-", verdict]
            )
        for m in item.metrics:
            ratio = f"{m.ratio:.3f}" if m.ratio is not None else "-"
            rows.append(
                [
                    item.cell_id,
                    m.metric,
                    f"{m.recorded_median:.4g}",
                    f"{m.rerun_median:.4g}",
                    ratio,
                    _verdict(m),
                ]
            )
    return rows


def _test(m: MetricReproduction) -> str:
    unit = f"; {m.unit}" if m.unit else ""
    if m.p_adjusted is not None and m.p_adjusted != m.p_value:
        return f"{m.method}, p={m.p_value:.3g}, Holm p={m.p_adjusted:.3g}{unit}"
    return f"{m.method}, p={m.p_value:.3g}{unit}" if m.p_value is not None else m.method


def _verdict(m: MetricReproduction) -> str:
    """yes / NO for a judged metric, with why when it is not a plain yes."""
    if not m.judged:
        verdict = "yes (not judged)" if m.reproduces else "differs (not judged)"
    elif m.reproduces and m.within_tolerance:
        verdict = "yes"
    elif m.reproduces and m.cannot_reach:
        verdict = f"can't tell (outside tolerance; {m.cannot_reach}: add repeats)"
    elif m.reproduces:
        verdict = f"yes (outside tolerance, within noise: {_test(m)})"
    elif m.method == "single":
        verdict = "NO (outside tolerance; one repeat on a side: no noise to test against)"
    else:
        verdict = f"NO (outside tolerance, significant ({_test(m)}))"
    return verdict + ("; repeats unstable" if m.unstable and m.judged else "")


def deciding_lines(items: Sequence[CellReproduction]) -> list[str]:
    """Which metrics decide, and how each is tested, for the lines under the table."""
    lines: list[str] = []
    groups: dict[tuple[str, tuple[str, ...]], int] = {}
    for item in items:
        names = tuple(m.metric for m in item.metrics if m.judged)
        key = (item.deciding_from, names)
        groups[key] = groups.get(key, 0) + 1
    for (source, names), count in groups.items():
        if names:
            cells = f"{count} cell{'s' if count != 1 else ''}"
            what = DECIDING_FROM.get(source, source)
            lines.append(f"judged on: {', '.join(names)} ({what}; {cells})")
    lines.append(
        "test: as orch diff: a metric fails to reproduce when it moved past the tolerance and "
        "the move is significant (exact Mann-Whitney U, ties included, or Welch's t on start "
        "means where a side ran several server starts; Holm-corrected over the judged "
        "metrics; where the repeats are too few for its p to reach alpha: can't tell, counted "
        "as reproduced; one repeat a side: the tolerance alone)"
    )
    units = {m.unit for item in items for m in item.metrics if m.judged and m.unit}
    if units - {ONE_START}:
        lines.append(f"note: {STARTS_NOTE}")
    if ONE_START in units:
        lines.append(f"note: {REPEATS_NOTE}")
    return lines
