"""The one reader of result bundles: a run or a cell, from a folder or a packed `.tar.gz`.

Every analysis (show, runs, report, diff, audit, bisect, resume checks) opens bundles here and
takes file names from `results/layout.py`. A document written by a newer orch than this one
(its `schema_version` above `layout.SCHEMA_VERSION`) is refused with one clear error, never
half understood.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any

from orchestrator.errors import BundleError
from orchestrator.results import layout
from orchestrator.results.archive import extract_with_root
from orchestrator.results.layout import (
    CELL_JSON,
    CELLS_DIR,
    MANIFEST,
    PLAN_JSON,
    RUN_JSON,
    SCHEMA_VERSION,
    is_archive_name,
    is_tmp,
)
from orchestrator.results.manifest import ManifestReport, verify_manifest


class BundleTooNew(BundleError):
    """A bundle written by a newer orch, whose layout this one cannot be sure to read."""


def check_schema(doc: Any, bundle: str | Path) -> None:
    """BundleTooNew when `doc` (run.json or cell.json) says a newer layout than this orch reads."""
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise BundleTooNew(
            f"bundle {bundle} was written by a newer orch (schema {version}, this orch reads up "
            f"to {SCHEMA_VERSION}); upgrade orch"
        )


def read_json(path: Path, *, required: bool = False) -> Any:
    """The JSON in `path`; None when absent and not required; BundleError when unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise BundleError(f"{path}: missing") from None
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: cannot read: {exc}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BundleError(f"{path}: not valid JSON: {exc}") from None


def read_json_noting(path: Path, problems: list[str]) -> Any:
    """The JSON in `path`, or None when missing; an unreadable file is noted in `problems`."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problems.append(f"{path}: unreadable: {exc}")
        return None


def is_run_dir(path: Path) -> bool:
    """True for a run folder (it holds run.json)."""
    return (path / RUN_JSON).is_file()


def is_cell_dir(path: Path) -> bool:
    """True for a cell folder (it holds cell.json)."""
    return (path / CELL_JSON).is_file()


@dataclass(frozen=True)
class RepeatRecord:
    """One benchmark run of a cell: `bench/<n>/` (measure) or `bench/warmup-<n>/`."""

    kind: str  # measure | warmup
    n: int
    path: Path

    @property
    def stdout(self) -> Path:
        """The client's stdout file."""
        return self.path / layout.STDOUT

    @property
    def stderr(self) -> Path:
        """The client's stderr file."""
        return self.path / layout.STDERR

    @cached_property
    def exit(self) -> dict[str, Any] | None:
        """exit.json: {rc, seconds, argv, timed_out}, or None when absent."""
        data = read_json(self.path / layout.EXIT_JSON)
        return data if isinstance(data, dict) else None


class CellRecord:
    """A recorded cell directory; JSON files are read on first use.

    Absent optional files read as None; a present but corrupt one raises BundleError.
    """

    def __init__(self, path: Path, run: RunBundle | None = None) -> None:
        self.path = Path(path)
        self.run = run  # keeps a packed run's extraction alive as long as this record

    def __repr__(self) -> str:
        return f"CellRecord({str(self.path)!r})"

    def _json(self, name: str) -> Any:
        return read_json(self.path / name)

    @property
    def bundle_name(self) -> Path:
        """What a person calls the bundle this cell is in: its run's source, else its folder."""
        return self.run.source if self.run is not None else self.path

    def document(self, name: str, problems: list[str]) -> Any:
        """A JSON file of the cell (a `layout` name), None when absent or unreadable (noted)."""
        data = read_json_noting(self.path / name, problems)
        if name == CELL_JSON:
            check_schema(data, self.bundle_name)
        return data

    def capture_documents(self, problems: list[str]) -> dict[str, Any]:
        """Every capture as `{"<name>.<moment>": parsed JSON}` (unreadable ones noted)."""
        cdir = self.path / layout.CAPTURES_DIR
        if not cdir.is_dir():
            return {}
        return {p.stem: read_json_noting(p, problems) for p in sorted(cdir.glob("*.json"))}

    @cached_property
    def cell_json(self) -> dict[str, Any]:
        """cell.json: {schema_version, cell, status, reason, failed_step, steps, runner}."""
        data = read_json(self.path / CELL_JSON, required=True)
        if not isinstance(data, dict):
            raise BundleError(f"{self.path / CELL_JSON}: not a JSON object")
        check_schema(data, self.bundle_name)
        return data

    @property
    def cell(self) -> dict[str, Any]:
        """The Cell as recorded (secrets redacted)."""
        cell = self.cell_json.get("cell")
        return cell if isinstance(cell, dict) else {}

    @property
    def id(self) -> str:
        """The cell id (the directory name when cell.json lacks one)."""
        return str(self.cell.get("id") or self.path.name)

    @property
    def status(self) -> str | None:
        """The runner's status: passed | failed | interrupted."""
        status = self.cell_json.get("status")
        return None if status is None else str(status)

    @property
    def reason(self) -> str | None:
        """Why it failed, when it did."""
        reason = self.cell_json.get("reason")
        return None if reason is None else str(reason)

    @property
    def failed_step(self) -> str | None:
        """The step that stopped the cell, if any."""
        step = self.cell_json.get("failed_step")
        return None if step is None else str(step)

    @property
    def steps(self) -> dict[str, Any]:
        """{step: {status, start, end}}."""
        steps = self.cell_json.get("steps")
        return steps if isinstance(steps, dict) else {}

    @property
    def axes(self) -> dict[str, Any]:
        """The matrix point."""
        axes = self.cell.get("axes")
        return axes if isinstance(axes, dict) else {}

    @property
    def host(self) -> str | None:
        """The inventory hostname it ran on."""
        host = self.cell.get("host")
        return None if host is None else str(host)

    @cached_property
    def repo(self) -> dict[str, Any] | None:
        """repo.json: requested ref, resolved sha, dirty state, reflog."""
        return self._json(layout.REPO_JSON)  # type: ignore[no-any-return]

    @cached_property
    def env_check(self) -> dict[str, Any] | None:
        """env_check.json: expected vs observed environment per server process."""
        return self._json(layout.ENV_CHECK_JSON)  # type: ignore[no-any-return]

    @cached_property
    def server(self) -> dict[str, Any] | None:
        """server.json: argv, cwd, pid, declared env."""
        return self._json(layout.SERVER_JSON)  # type: ignore[no-any-return]

    @cached_property
    def snapshot_pre(self) -> dict[str, Any] | None:
        """The probe's snapshot before the server started."""
        return self._json(layout.SNAPSHOT_PRE)  # type: ignore[no-any-return]

    @cached_property
    def snapshot_post(self) -> dict[str, Any] | None:
        """The probe's snapshot after the server stopped."""
        return self._json(layout.SNAPSHOT_POST)  # type: ignore[no-any-return]

    @cached_property
    def metrics(self) -> dict[str, Any] | None:
        """metrics.json (written by the controller), or None if absent."""
        return self._json(layout.METRICS_JSON)  # type: ignore[no-any-return]

    @property
    def events(self) -> list[dict[str, Any]]:
        """events.jsonl as a list (lines that are not JSON objects are skipped)."""
        path = self.path / layout.EVENTS
        out: list[dict[str, Any]] = []
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return out
        except OSError as exc:
            raise BundleError(f"{path}: cannot read: {exc}") from None
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict):
                out.append(item)
        return out

    @property
    def captures(self) -> dict[str, dict[str, Path]]:
        """{capture name: {moment: path}} from captures/<name>.<moment>.json."""
        out: dict[str, dict[str, Path]] = {}
        cdir = self.path / layout.CAPTURES_DIR
        if not cdir.is_dir():
            return out
        for p in sorted(cdir.glob("*.json")):
            stem = p.name[: -len(".json")]
            name, dot, moment = stem.rpartition(".")
            if dot:
                out.setdefault(name, {})[moment] = p
        return out

    def capture(self, name: str, moment: str) -> Any:
        """One captured JSON document, or None when it was not captured."""
        path = self.captures.get(name, {}).get(moment)
        return None if path is None else read_json(path)

    def _bench(self, kind: str) -> list[RepeatRecord]:
        bdir = self.path / layout.BENCH_DIR
        out = []
        if bdir.is_dir():
            for d in bdir.iterdir():
                m = layout.REPEAT_DIR.match(d.name)
                if d.is_dir() and m and (m.group(1) is not None) == (kind == "warmup"):
                    out.append(RepeatRecord(kind, int(m.group(2)), d))
        return sorted(out, key=lambda r: r.n)

    @property
    def repeats(self) -> list[RepeatRecord]:
        """Measured repeats bench/<n>/, in order."""
        return self._bench("measure")

    @property
    def warmups(self) -> list[RepeatRecord]:
        """Warmup runs bench/warmup-<n>/, in order."""
        return self._bench("warmup")

    @property
    def logs(self) -> dict[str, Path]:
        """The full logs that exist: server.log, setup.log, events.jsonl."""
        return {n: self.path / n for n in layout.LOGS if (self.path / n).is_file()}


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
        data = read_json(self.path / RUN_JSON)
        if data is None:
            raise BundleError(
                f"{self.path}: no run.json: not a run bundle",
                hint="give a run directory (results/<run-id>) or a packed .tar.gz",
            )
        if not isinstance(data, dict):
            raise BundleError(f"{self.path / RUN_JSON}: not a JSON object")
        check_schema(data, self.source)
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
    raise BundleError(f"{ref}: no such run", hint="`orch runs` lists the runs")


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


def run_id_of_cell(cell_dir: Path) -> str | None:
    """The run id when the cell sits in a bundle (`<run>/cells/<cell>`), else None."""
    parent = cell_dir.parent
    if parent.name == CELLS_DIR:
        data = read_json_noting(parent.parent / RUN_JSON, [])
        if isinstance(data, dict) and data.get("run_id"):
            return str(data["run_id"])
        return parent.parent.name
    return None


def cell_dirs(run_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    """run.json (empty when unreadable) and the complete cells of a run folder, in run.json's
    order, then any others by name (dot-named temporaries skipped); BundleError without cells/."""
    cells_dir = run_dir / CELLS_DIR
    if not cells_dir.is_dir():
        raise BundleError(f"{run_dir}: not a run directory (no {CELLS_DIR}/)")
    run = read_json_noting(run_dir / RUN_JSON, [])
    check_schema(run, run_dir)
    run = run if isinstance(run, dict) else {}
    present = {p.name: p for p in cells_dir.iterdir() if p.is_dir() and not p.name.startswith(".")}
    recorded = run.get("cells")
    listed = [c for c in (recorded if isinstance(recorded, dict) else {}) if c in present]
    order = listed + sorted(n for n in present if n not in listed)
    return run, [present[name] for name in order]


def recorded_plan_cells(run_dir: Path) -> list[dict[str, Any]] | None:
    """plan.json's rendered cells of a run folder; None when it cannot be read."""
    try:
        plan = read_json(run_dir / PLAN_JSON)
    except BundleError:
        return None
    if not isinstance(plan, dict):
        return None
    check_schema(plan, run_dir)
    cells = plan.get("cells")
    return [c for c in cells if isinstance(c, dict)] if isinstance(cells, list) else []
