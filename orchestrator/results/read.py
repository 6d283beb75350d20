"""The one reader of result bundles: a run or a cell, from a folder or a packed `.tar.gz`.

Every analysis (show, runs, report, diff, audit, bisect, resume checks) opens bundles here, as
`RunBundle` and the records of `results/records.py`, through `results/documents.py` (JSON,
checked against the newest layout this orch reads) with names from `results/layout.py`.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any

from orchestrator.errors import BundleError
from orchestrator.results import layout
from orchestrator.results.archive import extract_with_root
from orchestrator.results.documents import (
    DAMAGED,
    check_no_links,
    check_schema,
    is_cell_dir,
    is_run_dir,
    read_json,
    run_json_problem,
)
from orchestrator.results.layout import (
    CELLS_DIR,
    MANIFEST,
    PLAN_JSON,
    RUN_JSON,
    is_archive_name,
    is_tmp,
)
from orchestrator.results.manifest import ManifestReport, verify_manifest
from orchestrator.results.records import CellRecord


class RunBundle:
    """A recorded run, from a directory or an extracted `.tar.gz` (usable as a context manager).

    `cells` holds only complete cells (never `.tmp` directories), in plan order.
    """

    def __init__(
        self,
        path: Path,
        *,
        source: Path | None = None,
        tmpdir: Path | None = None,
        archive_root: str | None = None,
    ):
        self.path = Path(path)
        self.source = source or self.path  # the archive it came from, when packed
        self._tmpdir = tmpdir
        self.archive_root = archive_root  # the archive's top-level directory, when packed
        if tmpdir is not None:
            _EXTRACTED.add(tmpdir)
        if self.path.is_symlink():
            raise BundleError(f"{self.path}: a symbolic link, not a run folder: not followed")
        check_no_links(self.path)
        data = read_json(self.path / RUN_JSON)
        if data is None:
            raise BundleError(
                f"{self.path}: no run.json: not a run bundle",
                hint="give a run directory (results/<run-id>) or a packed .tar.gz",
            )
        if not isinstance(data, dict):
            raise BundleError(f"{self.path / RUN_JSON}: not a JSON object")
        check_schema(data, self.source)
        problem = run_json_problem(data)
        if problem:
            raise BundleError(f"{self.source}: run.json: {problem}", hint=DAMAGED)
        self.run: dict[str, Any] = data

    def __repr__(self) -> str:
        return f"RunBundle({str(self.source)!r})"

    def relative(self, path: Path) -> str:
        """`path` (inside the run) relative to the run directory, e.g. `cells/<id>/server.log`."""
        return Path(path).relative_to(self.path).as_posix()

    def member(self, path: Path) -> str:
        """The name `path` (inside the run) has in the packed archive: `<run-id>/cells/...`."""
        relative = self.relative(path)
        return f"{self.archive_root}/{relative}" if self.archive_root else relative

    def __enter__(self) -> RunBundle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Remove the extraction of a packed run now (otherwise at exit)."""
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            _EXTRACTED.discard(self._tmpdir)

    @property
    def packed(self) -> bool:
        """True when read from a .tar.gz: `path` is a temporary extraction, gone at exit."""
        return self._tmpdir is not None

    @property
    def run_id(self) -> str:
        """The run id (the directory name when run.json lacks one)."""
        return str(self.run.get("run_id") or self.path.name)

    @cached_property
    def plan(self) -> dict[str, Any] | None:
        """plan.json: every rendered cell."""
        return read_json(self.path / PLAN_JSON)  # type: ignore[no-any-return]

    @cached_property
    def inventory(self) -> dict[str, Any] | None:
        """inventory.json: resolved hosts, secrets redacted."""
        return read_json(self.path / layout.INVENTORY_JSON)  # type: ignore[no-any-return]

    @cached_property
    def hosts(self) -> dict[str, dict[str, Any]]:
        """{host: facts.json} taken at run start."""
        out: dict[str, dict[str, Any]] = {}
        hdir = self.path / layout.HOSTS_DIR
        if hdir.is_dir():
            for d in sorted(hdir.iterdir()):
                facts = read_json(d / layout.FACTS_JSON) if d.is_dir() else None
                if isinstance(facts, dict):
                    out[d.name] = facts
        return out

    @property
    def playbook_files(self) -> list[Path]:
        """Every file under playbook/, as given."""
        pdir = self.path / layout.PLAYBOOK_DIR
        return sorted(p for p in pdir.rglob("*") if p.is_file()) if pdir.is_dir() else []

    @cached_property
    def cells(self) -> dict[str, CellRecord]:
        """Complete cells by id: plan order first, then any others by id."""
        found: dict[str, CellRecord] = {}
        cdir = self.path / CELLS_DIR
        if cdir.is_dir():
            for d in sorted(cdir.iterdir()):
                if d.is_dir() and not d.name.startswith(".") and is_cell_dir(d):
                    found[d.name] = CellRecord(d, self)
        order = []
        plan_cells = (self.plan or {}).get("cells") if isinstance(self.plan, dict) else None
        for c in plan_cells or []:
            cid = c.get("id") if isinstance(c, dict) else None
            if cid in found and cid not in order:
                order.append(cid)
        order += [cid for cid in found if cid not in order]
        return {cid: found[cid] for cid in order}

    def cell(self, ref: str) -> CellRecord:
        """A cell by exact id or unique id prefix; BundleError when none or several match."""
        if ref in self.cells:
            return self.cells[ref]
        matches = [cid for cid in self.cells if cid.startswith(ref)]
        if len(matches) == 1:
            return self.cells[matches[0]]
        if matches:
            raise BundleError(
                f"{self.source}: {ref!r} matches {len(matches)} cells: {listing(matches)}",
                hint="give more of the cell id",
            )
        known = listing(list(self.cells)) or "none"
        raise BundleError(
            f"{self.source}: no cell {ref!r} ({len(self.cells)} cells: {known})",
            hint=f"`orch show {self.source}` lists every cell" if self.cells else None,
        )

    @property
    def finalized(self) -> bool:
        """True when MANIFEST.sha256 is present (the run was finished and sealed)."""
        return (self.path / MANIFEST).is_file()

    def verify(self) -> ManifestReport:
        """Check the bundle against its manifest (BundleError when it has none)."""
        return verify_manifest(self.path)


LISTING_LIMIT = 10


def listing(names: list[str], limit: int = LISTING_LIMIT) -> str:
    """Names joined by commas; past `limit`, the first ones and how many were left out."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", ... and {len(names) - limit} more"


# Extractions of packed runs live until close() or process exit: callers may keep only a path.
_EXTRACTED: set[Path] = set()


@atexit.register
def _remove_extracted() -> None:
    for tmp in list(_EXTRACTED):
        shutil.rmtree(tmp, ignore_errors=True)
    _EXTRACTED.clear()


def resolve_run(ref: str | Path, results_dir: Path | None = None) -> Path:
    """A run directory or archive from a path, a run id under `results_dir`, or a unique prefix."""
    path = Path(ref)
    if path.exists():
        return path
    if results_dir is not None:
        for candidate in (
            results_dir / str(ref),
            results_dir / f"{ref}{layout.ARCHIVE_SUFFIXES[0]}",
        ):
            if candidate.exists():
                return candidate
        if results_dir.is_dir() and "/" not in str(ref):
            matches = sorted(
                p for p in results_dir.iterdir() if p.name.startswith(str(ref)) and _run_like(p)
            )
            if len(matches) == 1:
                return matches[0]
            if matches:
                names = listing([p.name for p in matches])
                raise BundleError(
                    f"{ref!r} matches {len(matches)} runs: {names}",
                    hint="give more of the run id; `orch runs` lists them",
                )
    if results_dir is None:
        raise BundleError(f"{ref}: no such run", hint="`orch runs` lists the runs")
    raise BundleError(
        f"{ref}: no such run under {results_dir}",
        hint="`orch runs` lists the runs; --results DIR or ORCH_RESULTS=DIR name another folder",
    )


def _run_like(path: Path) -> bool:
    return is_run_dir(path) or (path.is_file() and is_archive_name(path.name))


def open_run(path: str | Path, results_dir: Path | None = None) -> RunBundle:
    """Open a run directory, a packed run `.tar.gz`, or (with `results_dir`) a run id or prefix.

    A packed run is extracted into a temporary directory removed by `close()`, on leaving a
    `with` block, or at exit.
    """
    resolved = resolve_run(path, results_dir)
    if resolved.is_dir():
        return RunBundle(resolved)
    if not is_archive_name(resolved.name):
        raise BundleError(f"{resolved}: not a run directory or a .tar.gz")
    tmp = Path(tempfile.mkdtemp(prefix="orch-bundle-"))
    try:
        root, top = extract_with_root(resolved, tmp / "run")
        return RunBundle(root, source=resolved, tmpdir=tmp, archive_root=top)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def run_of(cell: CellRecord) -> RunBundle | None:
    """The run a cell was read from, None for a loose cell folder."""
    return cell.run if isinstance(cell.run, RunBundle) else None


def open_cell(path: str | Path, results_dir: Path | None = None) -> CellRecord:
    """Open a cell: its directory, or `RUN/CELL` where CELL is an id or a unique id prefix.

    RUN is anything `open_run` accepts (directory, .tar.gz, or an id under `results_dir`).
    """
    p = Path(path)
    if p.is_dir() and is_cell_dir(p):
        if is_tmp(p.name):
            raise BundleError(f"{p}: an incomplete cell (a write in progress or interrupted)")
        run_dir = p.parent.parent
        if p.parent.name == CELLS_DIR and is_run_dir(run_dir):
            run = RunBundle(run_dir)
            return run.cells.get(p.name) or CellRecord(p, run)
        check_no_links(p)
        return CellRecord(p)
    if (p.is_dir() and is_run_dir(p)) or (p.is_file() and is_archive_name(p.name)):
        raise BundleError(
            f"{path} is a run, not a cell",
            hint=f"name one of its cells: {str(path).rstrip('/')}/CELL (`orch show {path}` "
            "lists them)",
        )
    run_ref, sep, cell_ref = str(path).rstrip("/").rpartition("/")
    if not sep or not run_ref or not cell_ref:
        raise BundleError(f"{path}: not a cell directory nor RUN/CELL")
    if run_ref.endswith(f"/{CELLS_DIR}"):
        run_ref = run_ref[: -len(CELLS_DIR) - 1]
    return open_run(run_ref, results_dir).cell(cell_ref)


def open_run_or_cell(ref: str, results_dir: Path) -> RunBundle | CellRecord:
    """`orch show`'s REF: a run (directory, .tar.gz or id) or a cell (directory or RUN/CELL)."""
    path = Path(ref)
    is_run = is_run_dir(path) or is_archive_name(ref)
    if not is_run and "/" not in ref.rstrip("/") and not is_cell_dir(path):
        is_run = True
    return open_run(ref, results_dir) if is_run else open_cell(ref, results_dir)


def local_path(ref: str, results_dir: Path) -> Path:
    """A local directory for a run or cell reference (a packed run is extracted)."""
    path = Path(ref)
    if path.is_dir():
        return path
    if "/" in ref.rstrip("/") and not is_archive_name(ref):
        return open_cell(ref, results_dir).path
    return open_run(ref, results_dir).path
