"""Writing result bundles: every file atomically, cells whole, the manifest last.

Names come from `results/layout.py`; reading is `results/read.py`. Writing rules: every file is
written to a temporary name and renamed; a cell directory is assembled in `cells/.<id>.tmp/`,
redacted, then renamed to `cells/<id>/`, so a reader never sees half a cell; `MANIFEST.sha256`
comes last and any later write removes it again (a manifest present always describes the bundle
as it is).
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator.errors import BundleError, ResultsWriteError
from orchestrator.results.archive import extract_archive
from orchestrator.results.documents import read_json
from orchestrator.results.layout import (
    CELL_JSON,
    CELLS_DIR,
    MANIFEST,
    PLAYBOOK_DIR,
    RETRIED_DIR,
    RUN_JSON,
    SCHEMA_VERSION,
)
from orchestrator.results.manifest import write_manifest as _write_manifest
from orchestrator.secrets.redact import redact_tree

FINISHED_STATUSES = ("passed", "failed")  # a cell with another status is redone on --resume
_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


# --- small helpers ------------------------------------------------------------------------


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"


def _with_schema(data: Any) -> Any:
    if isinstance(data, Mapping) and "schema_version" not in data:
        return {"schema_version": SCHEMA_VERSION, **data}
    return data


def _safe_rel(relpath: str | Path) -> PurePosixPath:
    rel = PurePosixPath(Path(relpath).as_posix())
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or str(rel) == ".":
        raise BundleError(f"{relpath}: not a relative path inside the bundle")
    return rel


def _atomic_write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk keeps the old file and gets its space back
        raise


_WHY = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}


_ERRNO_IN_TEXT = re.compile(r"\[Errno (\d+)\]")


def _errno_of(exc: OSError) -> int | None:
    """The errno of `exc`; shutil.copytree's Error holds its files' errors only as text."""
    if exc.errno is not None or not isinstance(exc, shutil.Error):
        return exc.errno
    found = _ERRNO_IN_TEXT.search(str(exc.args[0] if exc.args else ""))
    return int(found.group(1)) if found else None


def write_problem(exc: OSError) -> str:
    """Why a write failed, in words: `no space left on device`, `read-only file system`."""
    return _WHY.get(_errno_of(exc) or 0) or (exc.strerror or str(exc)).lower()


def check_writable(folder: Path, results_dir: Path | None = None) -> None:
    """Create `folder` if needed and write a few bytes there, or a ResultsWriteError (exit 2)
    naming `results_dir` (the folder the user gave) when `folder` is inside it, and why.

    A results folder that cannot be written is refused before anything runs: permission
    denied, read-only file system, no space left (root ignores mode bits, not a read-only mount).
    """
    given = Path(results_dir) if results_dir is not None else Path(folder)
    probe = Path(folder) / f".write-check-{os.getpid()}.tmp"
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        try:
            with open(probe, "wb") as fh:
                fh.write(b"orch write check\n" * 64)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            probe.unlink(missing_ok=True)
    except OSError as exc:
        where = Path(exc.filename) if exc.filename else Path(folder)
        shown = given if given in (where, *where.parents) else where
        raise ResultsWriteError(
            f"{shown}: cannot write the results folder: {write_problem(exc)}",
            before_run=True,
            hint="choose another folder with --results, or make this one writable",
        ) from None


def new_run_id(playbook_name: str, now: datetime | None = None) -> str:
    """`20261130-142501-eagle3-regression-3f9c`: local time, playbook slug, 4 random hex."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    slug = _SLUG_BAD.sub("-", playbook_name).strip("-.")[:40].strip("-.") or "run"
    return f"{stamp}-{slug}-{secrets.token_hex(2)}"


# --- writing ------------------------------------------------------------------------------


class BundleWriter:
    """Writes one run's bundle under `results_dir/run_id/`.

    `new=True` refuses an existing directory; `new=False` reopens one (`--resume`) and drops its
    manifest until `finalize()`. An empty `run_id` gets a fresh `new_run_id(playbook)`.

    A folder that cannot be written (permission, read-only, full) is a `ResultsWriteError`
    (exit 2) here, before anything runs. Once the run has started (run.json written), a failed
    write no longer raises, except installing a cell: the run goes on (cells keep their results
    on their hosts), `failure` and `unrecorded` say what was lost, and `--resume` collects it.
    """

    def __init__(
        self, results_dir: Path, run_id: str, *, new: bool = True, playbook: str = "run"
    ) -> None:
        self.run_id = run_id or new_run_id(playbook)
        self.path = Path(results_dir) / self.run_id
        self.failure: ResultsWriteError | None = None  # the first failed write of a started run
        self.unrecorded: list[str] = []  # cells whose results could not be installed
        self._started = False
        if new:
            if self.path.exists() and any(self.path.iterdir()):
                raise BundleError(f"{self.path}: a run with this id already exists")
        elif not self.path.is_dir():
            raise BundleError(f"{self.path}: no such run to resume")
        check_writable(self.path, Path(results_dir))
        self.cells_dir = self.path / CELLS_DIR
        self._invalidate()

    def _write_failed(self, exc: OSError, what: str) -> ResultsWriteError:
        """The error for a failed write of `what`; the first one of a started run is kept."""
        error = ResultsWriteError(
            f"{self.path}: cannot write {what}: {write_problem(exc)}", before_run=not self._started
        )
        if self._started and self.failure is None:
            self.failure = error
        return error

    def _invalidate(self) -> None:
        try:
            (self.path / MANIFEST).unlink(missing_ok=True)
        except OSError as exc:  # a read-only folder: the manifest must not outlive a change
            raise self._write_failed(exc, MANIFEST) from None

    def _target(self, relpath: str | Path) -> Path:
        return self.path / _safe_rel(relpath)

    def exists(self, relpath: str | Path) -> bool:
        """True when the bundle holds `relpath`."""
        return self._target(relpath).exists()

    def read_json(self, relpath: str | Path) -> Any:
        """A JSON file of the bundle, or None when it is absent."""
        return read_json(self._target(relpath))

    def write_json(self, relpath: str | Path, data: Any) -> Path:
        """Write JSON atomically, adding `schema_version` to a mapping that lacks one."""
        return self.write_file(relpath, _dumps(_with_schema(data)))

    def write_file(self, relpath: str | Path, data: str | bytes) -> Path:
        """Write a text or binary file atomically (tmp + rename)."""
        target = self._target(relpath)
        try:
            self._invalidate()
            _atomic_write(target, data)
        except (OSError, ResultsWriteError) as exc:
            error = (
                exc if isinstance(exc, ResultsWriteError) else self._write_failed(exc, str(relpath))
            )
            if not self._started:
                raise error from None
            return target  # kept in `failure`; the run goes on and reports it at its end
        if str(relpath) == RUN_JSON:
            self._started = True
        return target

    def copy_playbook_files(self, files: Iterable[Path], base_dir: Path) -> list[Path]:
        """Copy the playbook's files into `playbook/`, keeping their layout relative to each other.

        Paths are taken relative to `base_dir`, or to the common ancestor of `base_dir` and every
        file when some (an `extends:` base in `../`) live above it.
        """
        sources = [Path(f).resolve() for f in files]
        if not sources:
            return []
        root = Path(os.path.commonpath([Path(base_dir).resolve(), *(s.parent for s in sources)]))
        out = []
        for src in sources:
            dest = self._target(Path(PLAYBOOK_DIR) / src.relative_to(root))
            self._invalidate()
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.tmp")
            try:
                shutil.copy2(src, tmp)
                os.replace(tmp, dest)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                if exc.errno in _WHY:  # the bundle's side: the results folder
                    raise self._write_failed(exc, str(PLAYBOOK_DIR)) from None
                raise BundleError(f"{src}: cannot copy into the bundle: {exc}") from None
            out.append(dest)
        return out

    # cells

    def cell_path(self, cell_id: str) -> Path:
        """Where cell `cell_id` lives (complete or not)."""
        if not cell_id or "/" in cell_id or cell_id.startswith("."):
            raise BundleError(f"{cell_id!r}: not a cell id")
        return self.cells_dir / cell_id

    def complete_cells(self) -> set[str]:
        """Ids of cells already recorded with a finished status (kept on `--resume`)."""
        done = set()
        if self.cells_dir.is_dir():
            for d in self.cells_dir.iterdir():
                if d.is_dir() and not d.name.startswith(".") and _cell_finished(d):
                    done.add(d.name)
        return done

    def set_aside_failed(self, cell_ids: Iterable[str]) -> set[str]:
        """Move each of these cells that finished as failed to `retried/<id>.<n>/` (kept as
        evidence, the manifest covers it) so the cell can run again; the ids moved."""
        moved = set()
        for cid in cell_ids:
            final = self.cell_path(cid)
            if _cell_status(final) != "failed":
                continue
            self._invalidate()
            aside = self.path / RETRIED_DIR
            aside.mkdir(parents=True, exist_ok=True)
            n = 1
            while (aside / f"{cid}.{n}").exists():
                n += 1
            os.replace(final, aside / f"{cid}.{n}")
            moved.add(cid)
        return moved

    def _install_cell(self, cell_id: str, fill: Any, secret_values: Iterable[str]) -> Path:
        final = self.cell_path(cell_id)
        if final.exists() and _cell_finished(final):
            raise BundleError(f"{final}: cell already recorded; a bundle is not rewritten")
        self._invalidate()
        staging = self.cells_dir / f".{cell_id}.tmp"
        try:
            self.cells_dir.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(staging, ignore_errors=True)  # left by an interrupted write
            fill(staging)
            redact_tree(staging, secret_values)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)  # half a cell: never left, space back
            if _errno_of(exc) not in _WHY:
                raise
            if cell_id not in self.unrecorded:
                self.unrecorded.append(cell_id)
            raise self._write_failed(exc, f"{CELLS_DIR}/{cell_id}") from None
        if final.exists():  # an interrupted cell: set it aside, then swap
            old = self.cells_dir / f".{cell_id}.old.tmp"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(staging, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, final)
        return final

    def add_cell_archive(
        self, cell_id: str, archive: Path, secret_values: Iterable[str] = ()
    ) -> Path:
        """Install the runner's `<cell>.tar.gz` as `cells/<cell_id>/`, redacted; its path."""
        return self._install_cell(
            cell_id, lambda staging: extract_archive(archive, staging), secret_values
        )

    def add_cell_dir(self, cell_id: str, src_dir: Path, secret_values: Iterable[str] = ()) -> Path:
        """Install a copy of a cell directory as `cells/<cell_id>/`, redacted; its path."""
        if not Path(src_dir).is_dir():
            raise BundleError(f"{src_dir}: not a directory")

        def fill(staging: Path) -> None:
            shutil.copytree(src_dir, staging, symlinks=True)

        return self._install_cell(cell_id, fill, secret_values)

    def write_cell_file(self, cell_id: str, relpath: str | Path, data: Any) -> Path:
        """Add a file to a recorded cell (e.g. metrics.json), atomically.

        A mapping or list is written as JSON (mappings get `schema_version`); str/bytes as is.
        """
        cell = self.cell_path(cell_id)
        if not cell.is_dir():
            raise BundleError(f"{cell}: no such cell in the bundle")
        target = cell / _safe_rel(relpath)
        payload = data if isinstance(data, str | bytes) else _dumps(_with_schema(data))
        self._invalidate()
        _atomic_write(target, payload)
        return target

    def finalize(self) -> Path:
        """Write MANIFEST.sha256 over everything written so far: the last write of a run.

        After a failed write of a started run there is no manifest (the bundle is incomplete)."""
        if self.failure is not None:
            return self.path / MANIFEST  # none: a manifest would vouch for a bundle with gaps
        try:
            return _write_manifest(self.path)
        except OSError as exc:
            (self.path / f".{MANIFEST}.tmp").unlink(missing_ok=True)
            error = self._write_failed(exc, MANIFEST)
            if not self._started:
                raise error from None
            return self.path / MANIFEST


def _cell_status(cell_dir: Path) -> Any:
    try:
        data = json.loads((cell_dir / CELL_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("status") if isinstance(data, dict) else None


def _cell_finished(cell_dir: Path) -> bool:
    return _cell_status(cell_dir) in FINISHED_STATUSES
