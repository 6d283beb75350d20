"""A cell's evidence for analysis (report, diff, audit): its documents as plain data.

Read through the bundle reader (`results/read.py`), so report and diff work on any directory in
the documented layout: a bundle's `cells/<id>/`, a host's `runs/<run>/<id>/`, or one unpacked by
hand. A missing file gives empty data; an unreadable one is also noted in `problems`, so nothing
is silently ignored. Snapshots are read in the probe's declared shape (`runner/probe/shape.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.analyze.metrics import REPEAT_KEY, finite_number, metric_names, values_of
from orchestrator.errors import BundleError
from orchestrator.results import layout
from orchestrator.results.documents import cell_dirs, check_no_links, is_cell_dir, run_id_of_cell
from orchestrator.results.records import CellRecord, Metrics, Snapshot

_NCCL_VERSION = re.compile(r"NCCL version ([0-9][^\s]*)")


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass
class CellEvidence:
    """Everything recorded about one cell, loaded from its directory."""

    path: Path
    id: str
    host: str | None
    axes: dict[str, Any]
    status: str | None
    reason: str | None
    failed_step: str | None
    cell: dict[str, Any]  # the Cell as recorded (secrets redacted)
    cell_json: dict[str, Any]  # the whole cell.json document
    repo: dict[str, Any]  # repo.json
    server: dict[str, Any]  # server.json
    env_check: dict[str, Any]  # env_check.json
    snapshot_pre: dict[str, Any]
    snapshot_post: dict[str, Any]
    metrics: dict[str, Any]  # metrics.json (bundle only)
    captures: dict[str, Any]  # "<name>.<moment>" -> parsed JSON
    run_id: str | None = None
    problems: list[str] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)  # profile.json (`profile:`)
    outputs: dict[str, Any] = field(default_factory=dict)  # outputs.json (`bench.fingerprint`)

    @classmethod
    def of_metrics(
        cls, metrics: dict[str, Any], *, profile: dict[str, Any] | None = None
    ) -> CellEvidence:
        """A passed cell known only by its metrics.json (and profile.json): what simulations
        and unit tests judge without a cell folder on disk."""
        return cls(
            path=Path("."),
            id="sim",
            host=None,
            axes={},
            status="passed",
            reason=None,
            failed_step=None,
            cell={},
            cell_json={},
            repo={},
            server={},
            env_check={},
            snapshot_pre={},
            snapshot_post={},
            metrics=metrics,
            captures={},
            profile=dict(profile or {}),
        )

    @classmethod
    def load(cls, cell_dir: Path, *, run_id: str | None = None) -> CellEvidence:
        """Load a cell directory; raises BundleError only when `cell_dir` is not a directory."""
        cell_dir = Path(cell_dir)
        if not cell_dir.is_dir():
            raise BundleError(f"{cell_dir}: not a cell directory")
        problems: list[str] = []
        record = CellRecord(cell_dir)
        cell_json = _as_dict(record.document(layout.CELL_JSON, problems))
        if not cell_json:
            problems.append(f"{cell_dir / layout.CELL_JSON}: missing")
        cell = _as_dict(cell_json.get("cell"))
        captures = record.capture_documents(problems)
        if run_id is None:
            run_id = run_id_of_cell(cell_dir)

        def document(name: str) -> dict[str, Any]:
            return _as_dict(record.document(name, problems))

        return cls(
            path=cell_dir,
            id=str(cell.get("id") or cell_dir.name),
            host=cell.get("host"),
            axes=_as_dict(cell.get("axes")),
            status=cell_json.get("status"),
            reason=cell_json.get("reason"),
            failed_step=cell_json.get("failed_step"),
            cell=cell,
            cell_json=cell_json,
            repo=document(layout.REPO_JSON),
            server=document(layout.SERVER_JSON),
            env_check=document(layout.ENV_CHECK_JSON),
            snapshot_pre=document(layout.SNAPSHOT_PRE),
            snapshot_post=document(layout.SNAPSHOT_POST),
            metrics=document(layout.METRICS_JSON),
            captures=captures,
            run_id=run_id,
            problems=problems,
            profile=document(layout.PROFILE_JSON),
            outputs=document(layout.OUTPUTS_JSON),
        )

    @property
    def pre(self) -> Snapshot:
        """The snapshot taken before the server started."""
        return Snapshot(self.snapshot_pre)

    @property
    def post(self) -> Snapshot:
        """The snapshot taken after the server stopped."""
        return Snapshot(self.snapshot_post)

    @property
    def repeats(self) -> list[dict[str, Any]]:
        """The measured repeats from metrics.json: `[{"n": 1, metric: value, ...}, ...]`."""
        return Metrics(self.metrics).repeats

    @property
    def metric_names(self) -> list[str]:
        """Metric names in repeats, then any only in the summary, in first-seen order."""
        names = metric_names(self.repeats)
        names += [m for m in _as_dict(self.metrics.get("summary")) if m not in names]
        return names

    @property
    def expectations(self) -> list[dict[str, Any]]:
        """Checked expectations from metrics.json: `{"metric", "ok", "bound", "value"}`."""
        return Metrics(self.metrics).expectations

    def values(self, metric: str) -> list[float]:
        """Finite values of one metric across repeats, falling back to the summary median."""
        out = values_of(self.repeats, metric)
        if not out:
            summary = _as_dict(_as_dict(self.metrics.get("summary")).get(metric))
            median = finite_number(summary.get("median"))
            if median is not None:
                out.append(median)
        return out

    def repeat_rows(self) -> Iterator[tuple[Any, str, Any]]:
        """(repeat number, metric, value) for every metric of every repeat, in order."""
        for index, repeat in enumerate(self.repeats, start=1):
            number = repeat.get(REPEAT_KEY, index)
            for name, value in repeat.items():
                if name != REPEAT_KEY:
                    yield number, name, value

    def nccl_log_version(self) -> str | None:
        """The `NCCL version X` the server logged (the library really loaded), if any."""
        log = self.path / layout.SERVER_LOG
        if not log.is_file():
            return None
        try:
            with log.open(encoding="utf-8", errors="replace") as handle:
                for line in handle:  # server logs can be large: stream, stop at the first hit
                    match = _NCCL_VERSION.search(line)
                    if match:
                        return match.group(1)
        except OSError as exc:
            self.problems.append(f"{log}: unreadable: {exc}")
        return None


@dataclass
class RunEvidence:
    """A run directory: run.json plus its cells, in run.json's order when it lists them."""

    path: Path
    run: dict[str, Any]
    cells: list[CellEvidence]

    @property
    def run_id(self) -> str:
        """The run id from run.json, else the directory name."""
        return str(self.run.get("run_id") or self.path.name)


def load_run(run_dir: Path) -> RunEvidence:
    """Load every complete cell of a run directory (`cells/<id>/`; dot-named temps skipped)."""
    run_dir = Path(run_dir)
    check_no_links(run_dir)
    run, dirs = cell_dirs(run_dir)
    run_id = str(run.get("run_id") or run_dir.name)
    cells = [CellEvidence.load(path, run_id=run_id) for path in dirs]
    return RunEvidence(path=run_dir, run=run, cells=cells)


def load_cells(path: Path) -> list[CellEvidence]:
    """Cells of a run directory, or the one cell of a cell directory.

    A cell directory still being written (or left behind by an interrupted write) is refused:
    its files may be half there, so reading it would pass partial evidence off as complete.
    """
    path = Path(path)
    if layout.in_progress(path.resolve().name):
        raise BundleError(
            f"{path}: an incomplete cell (a write in progress or interrupted), not read",
            hint="pass a complete cell (cells/<id>/) or the run directory",
        )
    if (path / layout.CELLS_DIR).is_dir():
        return load_run(path).cells
    if is_cell_dir(path):
        check_no_links(path)
        return [CellEvidence.load(path)]
    raise BundleError(
        f"{path}: neither a run directory (cells/) nor a cell directory (cell.json)",
        hint="pass results/<run-id> or results/<run-id>/cells/<cell-id>",
    )
