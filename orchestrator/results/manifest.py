"""MANIFEST.sha256: the hash of every file of a run bundle, written last, checked by audit.

Format (what `sha256sum -c` reads): one `<sha256>  <relative posix path>` line per file, sorted
by path. The manifest itself and anything inside a `.<name>.tmp` entry (a write in progress or
abandoned) are not listed.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import BundleError
from orchestrator.results.layout import MANIFEST, is_tmp

MANIFEST_NAME = MANIFEST
_BLOCK = 1024 * 1024


def bundle_files(run_dir: Path) -> list[str]:
    """Relative posix paths of the regular files a manifest covers, sorted."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(run_dir):
        dirnames[:] = [d for d in dirnames if not is_tmp(d)]
        rel_dir = Path(dirpath).relative_to(run_dir)
        for name in filenames:
            if is_tmp(name):
                continue
            rel = (rel_dir / name).as_posix()
            if rel == MANIFEST_NAME:
                continue
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            out.append(rel)
    return sorted(out)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(run_dir: Path) -> Path:
    """Hash every file of `run_dir` into MANIFEST.sha256 (atomically); its path."""
    lines = [f"{sha256_file(run_dir / rel)}  {rel}\n" for rel in bundle_files(run_dir)]
    target = run_dir / MANIFEST_NAME
    tmp = run_dir / f".{MANIFEST_NAME}.tmp"
    tmp.write_text("".join(lines), encoding="utf-8")
    os.replace(tmp, target)
    return target


@dataclass
class ManifestReport:
    """What `verify_manifest` found; `ok` only when every list is empty."""

    mismatched: list[str] = field(default_factory=list)  # content changed since the manifest
    missing: list[str] = field(default_factory=list)  # listed but gone
    extra: list[str] = field(default_factory=list)  # present but not listed
    checked: int = 0

    @property
    def ok(self) -> bool:
        """True when the bundle is exactly what the manifest describes."""
        return not (self.mismatched or self.missing or self.extra)


def read_manifest(run_dir: Path) -> dict[str, str]:
    """{relative path: sha256} from MANIFEST.sha256; BundleError if absent or malformed."""
    path = run_dir / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BundleError(
            f"{path}: no manifest: the run was not finalized (still running, or its controller "
            "was killed)",
            hint="`orch apply --resume RUN` finishes a run whose controller died",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: cannot read the manifest: {exc}") from None
    entries: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not rel:
            raise BundleError(f"{path}:{lineno}: malformed manifest line {line!r}")
        if rel.startswith("/") or ".." in rel.split("/"):
            raise BundleError(f"{path}:{lineno}: path outside the bundle: {rel!r}")
        entries[rel] = digest
    return entries


def verify_manifest(run_dir: Path) -> ManifestReport:
    """Compare `run_dir` against its MANIFEST.sha256: changed, missing and extra files."""
    expected = read_manifest(run_dir)
    present = set(bundle_files(run_dir))
    report = ManifestReport()
    for rel, digest in sorted(expected.items()):
        if rel not in present:
            report.missing.append(rel)
            continue
        report.checked += 1
        if sha256_file(run_dir / rel) != digest:
            report.mismatched.append(rel)
    report.extra = sorted(present - set(expected))
    return report
