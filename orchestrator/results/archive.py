"""Packed runs: a run folder written as one `.tar.gz`, and archives extracted safely.

The runner's cell archives and `orch pack`'s run archives pass through here: no absolute paths,
no `..`, and nothing but regular files and folders (bundles orch writes hold no links).
"""

from __future__ import annotations

import gzip
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path, PurePosixPath

from orchestrator.errors import BundleError
from orchestrator.results.layout import RUN_JSON, is_archive_name, is_tmp
from orchestrator.results.packed import open_archive


def _check_member(member: tarfile.TarInfo, archive: Path) -> None:
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        raise BundleError(f"{archive}: unsafe path in archive: {member.name!r}")
    if member.issym() or member.islnk():
        # A chain of links that each look inside can still lead out: no link is accepted.
        link = PurePosixPath(member.linkname)
        base = name.parent if member.issym() else PurePosixPath()
        target = os.path.normpath(str(base / link))
        where = (
            "out of the archive"
            if link.is_absolute() or target.startswith("..")
            else "in the archive"
        )
        raise BundleError(
            f"{archive}: link {where}: {member.name} -> {member.linkname}: refused",
            hint="a bundle orch wrote holds only files and folders",
        )
    if not (member.isfile() or member.isdir()):
        raise BundleError(f"{archive}: unsupported entry (device or fifo): {member.name!r}")


def extract_archive(archive: Path, dest: Path) -> Path:
    """Extract `archive` (.tar.gz) into `dest` safely; `dest` must not exist yet.

    No absolute paths, no `..`, no links, no devices: BundleError. When the archive holds
    exactly one top-level directory (a cell or run packed with its name), its contents become
    `dest`'s, so `dest/cell.json` or `dest/run.json` is where a reader expects it.
    """
    return extract_with_root(archive, dest)[0]


def extract_with_root(archive: Path, dest: Path) -> tuple[Path, str | None]:
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
        os.replace(root, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest, top


def _walk_sorted(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not is_tmp(d))
        base = Path(dirpath)
        for d in dirnames:
            yield base / d
        for name in sorted(filenames):
            if not is_tmp(name):
                yield base / name


def pack(run_dir: Path, out: Path | None = None) -> Path:
    """Write `<run>.tar.gz` (entries sorted, owners and gzip time zeroed); its path.

    `out` is the archive's path, or a directory to write `<run>.tar.gz` in. Unfinished `.tmp`
    entries are left out. The archive holds one top-level `<run-id>/`.
    """
    run_dir = Path(run_dir)
    if run_dir.is_file() and is_archive_name(run_dir.name):
        raise BundleError(f"{run_dir}: already a packed run", hint="share this file as it is")
    if not (run_dir / RUN_JSON).is_file():
        raise BundleError(f"{run_dir}: no run.json: not a run bundle")
    out = Path(out) if out is not None else run_dir.with_name(f"{run_dir.name}.tar.gz")
    if out.is_dir():
        out = out / f"{run_dir.name}.tar.gz"
    elif not is_archive_name(out.name):  # readers know a packed run by its name
        raise BundleError(
            f"{out}: a packed run is a .tar.gz (or .tgz) file",
            hint=f"-o {out.with_name(out.name.split('.')[0] or run_dir.name)}.tar.gz, or a folder",
        )
    if out.resolve().is_relative_to(run_dir.resolve()):
        raise BundleError(f"{out}: the archive cannot be written inside the run it packs")
    name = run_dir.name

    def normalize(path: Path, info: tarfile.TarInfo) -> tarfile.TarInfo:
        if info.islnk():  # a hard-linked file is stored whole, never as a link
            info.type, info.linkname, info.size = tarfile.REGTYPE, "", path.stat().st_size
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
            tar.add(run_dir, arcname=name, recursive=False, filter=partial(normalize, run_dir))
            for path in _walk_sorted(run_dir):
                if not (path.is_file() or path.is_dir()) or path.is_symlink():
                    # Readers refuse anything else: an archive with it could not be read back.
                    raise BundleError(
                        f"{path}: not a regular file or folder: a packed run holds no links",
                        hint="remove it from the run folder, then pack again",
                    )
                arc = f"{name}/{path.relative_to(run_dir).as_posix()}"
                tar.add(path, arcname=arc, recursive=False, filter=partial(normalize, path))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
