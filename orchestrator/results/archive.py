"""Packed runs (`.tar.gz`): a run folder written as one archive, and archives read within bounds.

The runner's cell archives and `orch pack`'s run archives pass through here. Reading is bounded:
a 14 MB gzip bomb unpacks to gigabytes, so `open_archive` refuses an archive whose members' sizes
add up to more than MAX_UNPACKED_BYTES, or more than MAX_RATIO times the archive's own size (past
RATIO_FLOOR), or that holds more than MAX_MEMBERS entries; each header is checked before its data
is read, and the decompressed stream is never read past what the headers declare (plus
HEADER_ROOM). Extraction takes no absolute paths, no `..`, and nothing but regular files and
folders (bundles orch writes hold no links).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from functools import partial
from pathlib import Path, PurePosixPath
from types import TracebackType

from orchestrator.errors import BundleError
from orchestrator.results.layout import RUN_JSON, is_archive_name, is_tmp

MAX_UNPACKED_BYTES = 2 * 1024**3  # far above any run's logs and metrics
MAX_RATIO = 200  # logs compress about 5-50 times; a gzip bomb about 1,000 times
RATIO_FLOOR = 256 * 1024**2  # below this, any ratio is harmless
MAX_MEMBERS = 100_000  # files and folders: a run of 1,000 cells holds about 20,000
HEADER_ROOM = 64 * 1024  # what one member's headers (long names, pax records) may take

_READ_ERRORS = (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError)
_HINT = "is it a .tar.gz that `orch pack` wrote, copied whole?"


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} bytes"


class _BoundedStream(io.RawIOBase):
    """A decompressed stream that refuses to be read or skipped past `limit` bytes."""

    def __init__(self, inner: io.BufferedIOBase, archive: Path) -> None:
        super().__init__()
        self._inner = inner
        self._archive = archive
        self.limit = HEADER_ROOM  # raised as headers declare their members' data

    def _refuse(self) -> BundleError:
        return BundleError(
            f"{self._archive}: a header larger than {_size(HEADER_ROOM)}, "
            "or data beyond what the headers declare: refused",
            hint="a damaged archive, or one made to exhaust memory",
        )

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._inner.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self._inner.tell() + offset
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target > self.limit:
            raise self._refuse()  # tarfile seeks only forward from here, or back to a member
        return self._inner.seek(target)

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        room = self.limit - self._inner.tell()
        if room <= 0 < len(buffer):
            raise self._refuse()
        data = self._inner.read(min(len(buffer), room))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._inner.close()
        super().close()


def _decompressed(archive: Path) -> io.BufferedIOBase:
    """`archive` opened through the decompressor its first bytes name (none: a plain tar)."""
    with open(archive, "rb") as raw:
        magic = raw.read(6)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.open(archive, "rb")
    if magic.startswith(b"BZh"):
        return bz2.open(archive, "rb")
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.open(archive, "rb")
    return open(archive, "rb")


class PackedArchive:
    """One packed bundle, opened for reading within bounds (a context manager).

    `members()` lists every entry once, checking the bounds header by header; `read(name)` reads
    one regular file on demand. Nothing is written to disk.
    """

    def __init__(self, archive: Path) -> None:
        self.path = Path(archive)
        try:
            self._packed_size = self.path.stat().st_size
            self._stream = _BoundedStream(_decompressed(self.path), self.path)
        except _READ_ERRORS as exc:
            raise _unreadable(self.path, exc) from None
        try:
            self.tar = tarfile.open(fileobj=self._stream, mode="r:")  # noqa: SIM115
        except BaseException as exc:
            self._stream.close()
            if isinstance(exc, _READ_ERRORS):
                raise _unreadable(self.path, exc) from None
            raise
        self._members: list[tarfile.TarInfo] | None = None

    def __enter__(self) -> PackedArchive:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the archive file."""
        self.tar.close()
        self._stream.close()

    def members(self) -> list[tarfile.TarInfo]:
        """Every entry, in archive order; BundleError past MAX_MEMBERS or MAX_UNPACKED_BYTES."""
        if self._members is None:
            self._members = list(self._iter_members())
        return self._members

    def _iter_members(self) -> Iterator[tarfile.TarInfo]:
        count = 0
        total = 0
        try:
            while (member := self.tar.next()) is not None:
                count += 1
                if count > MAX_MEMBERS:
                    raise BundleError(
                        f"{self.path}: more than {MAX_MEMBERS:,} files and folders: refused",
                        hint="a bundle this large is likely not one orch wrote",
                    )
                total += max(member.size, 0)
                if total > MAX_UNPACKED_BYTES or (
                    total > RATIO_FLOOR and total > MAX_RATIO * self._packed_size
                ):
                    raise BundleError(
                        f"{self.path}: unpacks to more than {_size(total)} "
                        f"from {_size(self._packed_size)}: refused",
                        hint=f"orch reads at most {_size(MAX_UNPACKED_BYTES)}, and at most "
                        f"{MAX_RATIO} times the archive's size; this looks like a gzip bomb",
                    )
                end = member.offset_data + -(-max(member.size, 0) // 512) * 512
                self._stream.limit = max(self._stream.limit, end + HEADER_ROOM)
                yield member
        except BundleError:
            raise
        except _READ_ERRORS as exc:
            raise _unreadable(self.path, exc) from None

    def read(self, name: str, *, limit: int = MAX_UNPACKED_BYTES) -> bytes:
        """The content of regular file `name`; BundleError when absent, not a file or too big."""
        member = next((m for m in self.members() if m.name.rstrip("/") == name), None)
        if member is None or not member.isfile():
            raise BundleError(f"{self.path}: no file {name!r} in the archive")
        if member.size > limit:
            raise BundleError(f"{self.path}: {name} is larger than {_size(limit)}: not read")
        try:
            handle = self.tar.extractfile(member)
            return handle.read() if handle is not None else b""
        except _READ_ERRORS as exc:
            raise _unreadable(self.path, exc) from None

    def extract(self, dest: Path, members: list[tarfile.TarInfo]) -> None:
        """Write `members` (already checked by the caller) under `dest`, within the bounds."""
        try:
            if hasattr(tarfile, "data_filter"):
                self.tar.extractall(dest, members=members, filter="data")
            else:  # pragma: no cover - Python < 3.11.4; the caller's checks still hold
                self.tar.extractall(dest, members=members)
        except BundleError:
            raise
        except _READ_ERRORS as exc:
            raise _unreadable(self.path, exc) from None


def _unreadable(archive: Path, exc: BaseException) -> BundleError:
    # tarfile lists every method it tried, one per line: one line is enough.
    first = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
    return BundleError(f"{archive}: cannot extract: {first}", hint=_HINT)


def open_archive(archive: Path) -> PackedArchive:
    """Open a packed bundle for bounded reading; BundleError when it is not a readable archive."""
    return PackedArchive(archive)


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
