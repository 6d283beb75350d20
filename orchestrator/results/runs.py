"""`orch runs`: one line per run under a results folder, read without extracting packed runs."""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator.errors import BundleError
from orchestrator.results.documents import check_schema, is_run_dir, read_json, run_json_problem
from orchestrator.results.layout import MANIFEST, RUN_JSON, is_archive_name


@dataclass
class RunSummary:
    """One line of `orch runs`."""

    run_id: str
    path: Path
    started: str | None = None
    finished: str | None = None
    playbook: str | None = None
    status: str | None = None
    hosts: list[str] = field(default_factory=list)
    cells: int = 0
    passed: int = 0
    failed: int = 0
    not_run: int = 0  # interrupted or never started: no verdict either way
    finalized: bool = False  # MANIFEST.sha256 present
    packed: bool = False
    error: str | None = None  # run.json unreadable


_NO_VERDICT = ("pending", "not-run", "interrupted")


def _summary(run_id: str, path: Path, run: Any, *, finalized: bool, packed: bool) -> RunSummary:
    if not isinstance(run, dict):
        return RunSummary(run_id, path, packed=packed, error="run.json is not a JSON object")
    check_schema(run, path)
    wrong = run_json_problem(run)
    if wrong:
        return RunSummary(run_id, path, packed=packed, error=f"run.json: {wrong}")
    raw_cells = run.get("cells")
    cells: dict[str, Any] = raw_cells if isinstance(raw_cells, dict) else {}
    statuses = [c.get("status") for c in cells.values() if isinstance(c, dict)]
    hosts = run.get("hosts")
    if not isinstance(hosts, list):
        hosts = sorted({str(c.get("host")) for c in cells.values() if isinstance(c, dict)})
    return RunSummary(
        run_id=str(run.get("run_id") or run_id),
        path=path,
        started=run.get("started"),
        finished=run.get("finished"),
        playbook=run.get("playbook"),
        status=run.get("status"),
        hosts=[str(h) for h in hosts],
        cells=len(cells),
        passed=statuses.count("passed"),
        failed=sum(1 for s in statuses if s not in ("passed", None, *_NO_VERDICT)),
        not_run=sum(1 for s in statuses if s in _NO_VERDICT),
        finalized=finalized,
        packed=packed,
    )


def _archive_run_json(path: Path) -> tuple[Any, bool]:
    """run.json of a packed run without extracting it, and whether a manifest is inside."""
    with tarfile.open(path, "r:*") as tar:
        run: Any = None
        manifest = False
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if len(parts) > 2:
                continue
            if parts[-1] == MANIFEST:
                manifest = True
            elif parts[-1] == RUN_JSON and member.isfile():
                fh = tar.extractfile(member)
                if fh is not None:
                    run = json.loads(fh.read().decode("utf-8"))
        if run is None:
            raise BundleError(f"{path}: no run.json inside")
        return run, manifest


def list_runs(results_dir: Path) -> list[RunSummary]:
    """Every run under `results_dir` (directories, and packed runs with no directory beside).

    A run whose run.json cannot be read is listed with `error` set, not skipped.
    """
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        return []
    out: list[RunSummary] = []
    seen: set[str] = set()
    entries = sorted(results_dir.iterdir())
    for d in entries:
        if d.is_dir() and is_run_dir(d) and not d.name.startswith("."):
            try:
                run = read_json(d / RUN_JSON)
                summary = _summary(d.name, d, run, finalized=(d / MANIFEST).is_file(), packed=False)
            except BundleError as exc:
                summary = RunSummary(d.name, d, error=exc.message)
            out.append(summary)
            seen.add(summary.run_id)
            seen.add(d.name)
    for f in entries:
        if not (f.is_file() and is_archive_name(f.name)):
            continue
        stem = f.name.removesuffix(".tar.gz").removesuffix(".tgz")
        if stem in seen:
            continue
        try:
            run, manifest = _archive_run_json(f)
            summary = _summary(stem, f, run, finalized=manifest, packed=True)
        except (BundleError, tarfile.TarError, OSError, EOFError, ValueError) as exc:
            summary = RunSummary(stem, f, packed=True, error=f"cannot read: {exc}")
        if summary.run_id not in seen:
            out.append(summary)
            seen.add(summary.run_id)
    return sorted(out, key=lambda s: (s.started or "", s.run_id))
