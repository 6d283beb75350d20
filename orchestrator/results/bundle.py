"""Result bundles: written atomically, read from a directory or a packed `.tar.gz`.

Layout: docs/ARCHITECTURE.md, "The result bundle". Writing rules: every file is written to a
temporary name and renamed; a cell directory is assembled in `cells/.<id>.tmp/`, redacted, then
renamed to `cells/<id>/`, so a reader never sees half a cell; `MANIFEST.sha256` comes last and any
later write removes it again (a manifest present always describes the bundle as it is).
"""

from __future__ import annotations

import atexit
import gzip
import json
import os
import re
import secrets
import shutil
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any

from orchestrator.errors import BundleError
from orchestrator.results.archive import open_archive
from orchestrator.results.manifest import MANIFEST_NAME, ManifestReport, verify_manifest
from orchestrator.results.manifest import write_manifest as _write_manifest
from orchestrator.results.redact import redact_tree

SCHEMA_VERSION = 1
FINISHED_STATUSES = ("passed", "failed")  # a cell with another status is redone on --resume
_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_REPEAT = re.compile(r"^(warmup-)?(\d+)$")


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
    if isinstance(data, str):
        tmp.write_text(data, encoding="utf-8")
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)


def _is_tmp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


def _read_json(path: Path, *, required: bool = False) -> Any:
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


def new_run_id(playbook_name: str, now: datetime | None = None) -> str:
    """`20261130-142501-eagle3-regression-3f9c`: local time, playbook slug, 4 random hex."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    slug = _SLUG_BAD.sub("-", playbook_name).strip("-.")[:40].strip("-.") or "run"
    return f"{stamp}-{slug}-{secrets.token_hex(2)}"


# --- safe extraction ----------------------------------------------------------------------


def _check_member(member: tarfile.TarInfo, archive: Path) -> None:
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        raise BundleError(f"{archive}: unsafe path in archive: {member.name!r}")
    if member.issym() or member.islnk():
        link = PurePosixPath(member.linkname)
        base = name.parent if member.issym() else PurePosixPath()
        target = os.path.normpath(str(base / link))
        if link.is_absolute() or target == ".." or target.startswith("../"):
            raise BundleError(f"{archive}: link out of the archive: {member.name} -> {link}")
    elif not (member.isfile() or member.isdir()):
        raise BundleError(f"{archive}: unsupported entry (device or fifo): {member.name!r}")


def extract_archive(archive: Path, dest: Path) -> Path:
    """Extract `archive` (.tar.gz) into `dest` safely; `dest` must not exist yet.

    No absolute paths, no `..`, no links out, no devices: BundleError. When the archive holds
    exactly one top-level directory (a cell or run packed with its name), its contents become
    `dest`'s, so `dest/cell.json` or `dest/run.json` is where a reader expects it.
    """
    return _extract(archive, dest)[0]


def _extract(archive: Path, dest: Path) -> tuple[Path, str | None]:
    """`extract_archive`, and the name of the archive's one top-level directory (None if none)."""
    if dest.exists():
        raise BundleError(f"{dest}: already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        with open_archive(archive) as tar:  # bounded: a gzip bomb is refused, not unpacked
            members = tar.members()
            for member in members:
                _check_member(member, archive)
            tar.extract(staging, members)
        entries = list(staging.iterdir())
        root = staging
        top: str | None = None
        if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
            root = entries[0]
            top = root.name
            # The top folder is dropped: a link may no longer reach beside it (`top/x -> ../y`).
            for member in members:
                if member.issym() or member.islnk():
                    name = PurePosixPath(member.name)
                    base = name.parent if member.issym() else PurePosixPath()
                    target = os.path.normpath(str(base / member.linkname))
                    if target != top and not target.startswith(f"{top}/"):
                        raise BundleError(
                            f"{archive}: link out of the archive's folder: "
                            f"{member.name} -> {member.linkname}"
                        )
        os.replace(root, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest, top


# --- writing ------------------------------------------------------------------------------


class BundleWriter:
    """Writes one run's bundle under `results_dir/run_id/`.

    `new=True` refuses an existing directory; `new=False` reopens one (`--resume`) and drops its
    manifest until `finalize()`. An empty `run_id` gets a fresh `new_run_id(playbook)`.
    """

    def __init__(
        self, results_dir: Path, run_id: str, *, new: bool = True, playbook: str = "run"
    ) -> None:
        self.run_id = run_id or new_run_id(playbook)
        self.path = Path(results_dir) / self.run_id
        if new:
            if self.path.exists() and any(self.path.iterdir()):
                raise BundleError(f"{self.path}: a run with this id already exists")
            self.path.mkdir(parents=True, exist_ok=True)
        elif not self.path.is_dir():
            raise BundleError(f"{self.path}: no such run to resume")
        self.cells_dir = self.path / "cells"
        self._invalidate()

    def _invalidate(self) -> None:
        (self.path / MANIFEST_NAME).unlink(missing_ok=True)

    def _target(self, relpath: str | Path) -> Path:
        return self.path / _safe_rel(relpath)

    def exists(self, relpath: str | Path) -> bool:
        """True when the bundle holds `relpath`."""
        return self._target(relpath).exists()

    def read_json(self, relpath: str | Path) -> Any:
        """A JSON file of the bundle, or None when it is absent."""
        return _read_json(self._target(relpath))

    def write_json(self, relpath: str | Path, data: Any) -> Path:
        """Write JSON atomically, adding `schema_version` to a mapping that lacks one."""
        return self.write_file(relpath, _dumps(_with_schema(data)))

    def write_file(self, relpath: str | Path, data: str | bytes) -> Path:
        """Write a text or binary file atomically (tmp + rename)."""
        target = self._target(relpath)
        self._invalidate()
        _atomic_write(target, data)
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
            dest = self._target(Path("playbook") / src.relative_to(root))
            self._invalidate()
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.tmp")
            try:
                shutil.copy2(src, tmp)
            except OSError as exc:
                raise BundleError(f"{src}: cannot copy into the bundle: {exc}") from None
            os.replace(tmp, dest)
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

    def _install_cell(self, cell_id: str, fill: Any, secret_values: Iterable[str]) -> Path:
        final = self.cell_path(cell_id)
        if final.exists() and _cell_finished(final):
            raise BundleError(f"{final}: cell already recorded; a bundle is not rewritten")
        self._invalidate()
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        staging = self.cells_dir / f".{cell_id}.tmp"
        shutil.rmtree(staging, ignore_errors=True)  # left by an interrupted write
        fill(staging)
        redact_tree(staging, secret_values)
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
        """Write MANIFEST.sha256 over everything written so far: the last write of a run."""
        return _write_manifest(self.path)


def _cell_finished(cell_dir: Path) -> bool:
    try:
        data = json.loads((cell_dir / "cell.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("status") in FINISHED_STATUSES


# --- reading ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepeatRecord:
    """One benchmark run of a cell: `bench/<n>/` (measure) or `bench/warmup-<n>/`."""

    kind: str  # measure | warmup
    n: int
    path: Path

    @property
    def stdout(self) -> Path:
        """The client's stdout file."""
        return self.path / "stdout"

    @property
    def stderr(self) -> Path:
        """The client's stderr file."""
        return self.path / "stderr"

    @cached_property
    def exit(self) -> dict[str, Any] | None:
        """exit.json: {rc, seconds, argv, timed_out}, or None when absent."""
        data = _read_json(self.path / "exit.json")
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
        return _read_json(self.path / name)

    @cached_property
    def cell_json(self) -> dict[str, Any]:
        """cell.json: {schema_version, cell, status, reason, failed_step, steps, runner}."""
        data = _read_json(self.path / "cell.json", required=True)
        if not isinstance(data, dict):
            raise BundleError(f"{self.path / 'cell.json'}: not a JSON object")
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
        return self._json("repo.json")  # type: ignore[no-any-return]

    @cached_property
    def env_check(self) -> dict[str, Any] | None:
        """env_check.json: expected vs observed environment per server process."""
        return self._json("env_check.json")  # type: ignore[no-any-return]

    @cached_property
    def server(self) -> dict[str, Any] | None:
        """server.json: argv, cwd, pid, declared env."""
        return self._json("server.json")  # type: ignore[no-any-return]

    @cached_property
    def snapshot_pre(self) -> dict[str, Any] | None:
        """The probe's snapshot before the server started."""
        return self._json("snapshot.pre.json")  # type: ignore[no-any-return]

    @cached_property
    def snapshot_post(self) -> dict[str, Any] | None:
        """The probe's snapshot after the server stopped."""
        return self._json("snapshot.post.json")  # type: ignore[no-any-return]

    @cached_property
    def metrics(self) -> dict[str, Any] | None:
        """metrics.json (written by the controller), or None if absent."""
        return self._json("metrics.json")  # type: ignore[no-any-return]

    @property
    def events(self) -> list[dict[str, Any]]:
        """events.jsonl as a list (lines that are not JSON objects are skipped)."""
        path = self.path / "events.jsonl"
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
        cdir = self.path / "captures"
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
        return None if path is None else _read_json(path)

    def _bench(self, kind: str) -> list[RepeatRecord]:
        bdir = self.path / "bench"
        out = []
        if bdir.is_dir():
            for d in bdir.iterdir():
                m = _REPEAT.match(d.name)
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
        names = ("server.log", "setup.log", "events.jsonl")
        return {n: self.path / n for n in names if (self.path / n).is_file()}


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
        data = _read_json(self.path / "run.json")
        if data is None:
            raise BundleError(
                f"{self.path}: no run.json: not a run bundle",
                hint="give a run directory (results/<run-id>) or a packed .tar.gz",
            )
        if not isinstance(data, dict):
            raise BundleError(f"{self.path / 'run.json'}: not a JSON object")
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
        return _read_json(self.path / "plan.json")  # type: ignore[no-any-return]

    @cached_property
    def inventory(self) -> dict[str, Any] | None:
        """inventory.json: resolved hosts, secrets redacted."""
        return _read_json(self.path / "inventory.json")  # type: ignore[no-any-return]

    @cached_property
    def hosts(self) -> dict[str, dict[str, Any]]:
        """{host: facts.json} taken at run start."""
        out: dict[str, dict[str, Any]] = {}
        hdir = self.path / "hosts"
        if hdir.is_dir():
            for d in sorted(hdir.iterdir()):
                facts = _read_json(d / "facts.json") if d.is_dir() else None
                if isinstance(facts, dict):
                    out[d.name] = facts
        return out

    @property
    def playbook_files(self) -> list[Path]:
        """Every file under playbook/, as given."""
        pdir = self.path / "playbook"
        return sorted(p for p in pdir.rglob("*") if p.is_file()) if pdir.is_dir() else []

    @cached_property
    def cells(self) -> dict[str, CellRecord]:
        """Complete cells by id: plan order first, then any others by id."""
        found: dict[str, CellRecord] = {}
        cdir = self.path / "cells"
        if cdir.is_dir():
            for d in sorted(cdir.iterdir()):
                if d.is_dir() and not d.name.startswith(".") and (d / "cell.json").is_file():
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
        return (self.path / MANIFEST_NAME).is_file()

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


def _is_archive(path: Path) -> bool:
    return path.name.endswith((".tar.gz", ".tgz"))


def resolve_run(ref: str | Path, results_dir: Path | None = None) -> Path:
    """A run directory or archive from a path, a run id under `results_dir`, or a unique prefix."""
    path = Path(ref)
    if path.exists():
        return path
    if results_dir is not None:
        for candidate in (results_dir / str(ref), results_dir / f"{ref}.tar.gz"):
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
    return (path / "run.json").is_file() or (path.is_file() and _is_archive(path))


def open_run(path: str | Path, results_dir: Path | None = None) -> RunBundle:
    """Open a run directory, a packed run `.tar.gz`, or (with `results_dir`) a run id or prefix.

    A packed run is extracted into a temporary directory removed by `close()`, on leaving a
    `with` block, or at exit.
    """
    resolved = resolve_run(path, results_dir)
    if resolved.is_dir():
        return RunBundle(resolved)
    if not _is_archive(resolved):
        raise BundleError(f"{resolved}: not a run directory or a .tar.gz")
    tmp = Path(tempfile.mkdtemp(prefix="orch-bundle-"))
    try:
        root, top = _extract(resolved, tmp / "run")
        return RunBundle(root, source=resolved, tmpdir=tmp, archive_root=top)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def open_cell(path: str | Path, results_dir: Path | None = None) -> CellRecord:
    """Open a cell: its directory, or `RUN/CELL` where CELL is an id or a unique id prefix.

    RUN is anything `open_run` accepts (directory, .tar.gz, or an id under `results_dir`).
    """
    p = Path(path)
    if p.is_dir() and (p / "cell.json").is_file():
        if _is_tmp(p.name):
            raise BundleError(f"{p}: an incomplete cell (a write in progress or interrupted)")
        run_dir = p.parent.parent
        if p.parent.name == "cells" and (run_dir / "run.json").is_file():
            run = RunBundle(run_dir)
            return run.cells.get(p.name) or CellRecord(p, run)
        return CellRecord(p)
    if (p.is_dir() and (p / "run.json").is_file()) or (p.is_file() and _is_archive(p)):
        raise BundleError(
            f"{path} is a run, not a cell",
            hint=f"name one of its cells: {str(path).rstrip('/')}/CELL (`orch show {path}` "
            "lists them)",
        )
    run_ref, sep, cell_ref = str(path).rstrip("/").rpartition("/")
    if not sep or not run_ref or not cell_ref:
        raise BundleError(f"{path}: not a cell directory nor RUN/CELL")
    if run_ref.endswith("/cells"):
        run_ref = run_ref[: -len("/cells")]
    return open_run(run_ref, results_dir).cell(cell_ref)


# --- packing and listing ------------------------------------------------------------------


def _walk_sorted(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not _is_tmp(d))
        base = Path(dirpath)
        for d in dirnames:
            yield base / d
        for name in sorted(filenames):
            if not _is_tmp(name):
                yield base / name


def pack(run_dir: Path, out: Path | None = None) -> Path:
    """Write `<run>.tar.gz` (entries sorted, owners and gzip time zeroed); its path.

    `out` is the archive's path, or a directory to write `<run>.tar.gz` in. Unfinished `.tmp`
    entries are left out. The archive holds one top-level `<run-id>/`.
    """
    run_dir = Path(run_dir)
    if run_dir.is_file() and _is_archive(run_dir):
        raise BundleError(f"{run_dir}: already a packed run", hint="share this file as it is")
    if not (run_dir / "run.json").is_file():
        raise BundleError(f"{run_dir}: no run.json: not a run bundle")
    out = Path(out) if out is not None else run_dir.with_name(f"{run_dir.name}.tar.gz")
    if out.is_dir():
        out = out / f"{run_dir.name}.tar.gz"
    elif not _is_archive(out):  # readers know a packed run by its name
        raise BundleError(
            f"{out}: a packed run is a .tar.gz (or .tgz) file",
            hint=f"-o {out.with_name(out.name.split('.')[0] or run_dir.name)}.tar.gz, or a folder",
        )
    if out.resolve().is_relative_to(run_dir.resolve()):
        raise BundleError(f"{out}: the archive cannot be written inside the run it packs")
    name = run_dir.name

    def normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    tmp = out.with_name(f".{out.name}.tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with (
            tmp.open("wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            tar.add(run_dir, arcname=name, recursive=False, filter=normalize)
            for path in _walk_sorted(run_dir):
                arc = f"{name}/{path.relative_to(run_dir).as_posix()}"
                tar.add(path, arcname=arc, recursive=False, filter=normalize)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


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
            if parts[-1] == MANIFEST_NAME:
                manifest = True
            elif parts[-1] == "run.json" and member.isfile():
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
        if d.is_dir() and (d / "run.json").is_file() and not d.name.startswith("."):
            try:
                run = _read_json(d / "run.json")
                summary = _summary(
                    d.name, d, run, finalized=(d / MANIFEST_NAME).is_file(), packed=False
                )
            except BundleError as exc:
                summary = RunSummary(d.name, d, error=exc.message)
            out.append(summary)
            seen.add(summary.run_id)
            seen.add(d.name)
    for f in entries:
        if not (f.is_file() and _is_archive(f)):
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
