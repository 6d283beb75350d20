"""Packed bundles made to exhaust disk or memory are refused before they are unpacked."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from orchestrator.errors import BundleError
from orchestrator.results import archive
from orchestrator.results.archive import open_archive

RUN_JSON = json.dumps({"run_id": "bomb", "status": "passed"}).encode()
CHUNK = 16 * 1024 * 1024


def header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.type = kind
    return info.tobuf(tarfile.USTAR_FORMAT)


def packed(path: Path, head: bytes, zeros: int) -> Path:
    """A .tar.gz of `head` then `zeros` zero bytes (and the end blocks), kept small on disk by
    repeating one compressed chunk of zeros: gzip readers join concatenated members."""
    chunk = gzip.compress(b"\0" * CHUNK, 9)
    with open(path, "wb") as out:
        out.write(gzip.compress(head))
        for _ in range(zeros // CHUNK):
            out.write(chunk)
        out.write(gzip.compress(b"\0" * (zeros % CHUNK + (-zeros % 512) + 1024)))
    return path


def with_run_json() -> bytes:
    return header("run/run.json", len(RUN_JSON)) + RUN_JSON + b"\0" * (-len(RUN_JSON) % 512)


def test_orch_show_refuses_a_gzip_bomb_without_unpacking_it(tmp_path: Path) -> None:
    size = 3_000_000_000  # what the 3 MB archive unpacks to
    bomb = packed(tmp_path / "bomb.tar.gz", with_run_json() + header("run/big.log", size), size)
    assert bomb.stat().st_size < 4 * 1024 * 1024
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "show", str(bomb)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {bomb}: unpacks to more than 2.79 GiB from 2."), lines[0]
    assert "this looks like a gzip bomb" in lines[0]
    assert list(scratch.iterdir()) == []  # nothing was left in (or written to) the temp folder


def test_too_many_members_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive, "MAX_MEMBERS", 10)
    head = with_run_json() + b"".join(header(f"run/f{i}", 0) for i in range(11))
    many = packed(tmp_path / "many.tar.gz", head, 0)
    refused = pytest.raises(BundleError, match="more than 10 files and folders: refused")
    with open_archive(many) as tar, refused:
        tar.members()


def test_a_header_claiming_a_gigabyte_is_not_read_into_memory(tmp_path: Path) -> None:
    # A pax header is read whole by tarfile before orch sees the member it describes.
    head = with_run_json() + header("run/././@PaxHeader", 1024**3, tarfile.XHDTYPE)
    pax = packed(tmp_path / "pax.tar.gz", head, 1024**3)
    with open_archive(pax) as tar, pytest.raises(BundleError, match="a header larger than 64 KiB"):
        tar.members()


def test_members_are_read_on_demand_without_extracting(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "cells" / "c1").mkdir(parents=True)
    (run / "run.json").write_bytes(RUN_JSON)
    (run / "cells" / "c1" / "cell.json").write_text('{"status": "passed"}')
    with tarfile.open(tmp_path / "run.tar.gz", "w:gz") as tar:
        tar.add(run, arcname="run")
    before = set(tmp_path.rglob("*"))
    with open_archive(tmp_path / "run.tar.gz") as tar:
        names = [m.name for m in tar.members()]
        assert "run/cells/c1/cell.json" in names
        assert tar.read("run/run.json") == RUN_JSON
        assert tar.read("run/cells/c1/cell.json") == b'{"status": "passed"}'
        with pytest.raises(BundleError, match="no file 'run/cells' in the archive"):
            tar.read("run/cells")
    assert set(tmp_path.rglob("*")) == before
