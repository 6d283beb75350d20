"""Issue 10 item 14: a chain of relative links, each lexically inside the archive, that leads
out of it when followed. `orch show` refuses the archive and prints nothing from outside."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

from test_reader import CELL, orch, write_run

MARKER = "VICTIM-OUTSIDE-THE-ARCHIVE"


def _add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    tar.addfile(info)


def test_a_chain_of_relative_links_is_refused_by_show(tmp_path: Path) -> None:
    # The extraction lands in $TMPDIR/orch-bundle-*/run: three levels up is tmp_path/"a".
    tmpdir = tmp_path / "a" / "b"
    tmpdir.mkdir(parents=True)
    victim = write_run(tmp_path / "a", "victim", tmp_path)
    cell_json = victim / "cells" / CELL / "cell.json"
    doc = json.loads(cell_json.read_text())
    doc["reason"] = MARKER
    cell_json.write_text(json.dumps(doc))

    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        data = (victim / "run.json").read_bytes()
        info = tarfile.TarInfo("run.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for folder in ("d", "d/e", "d/e/f"):
            entry = tarfile.TarInfo(folder)
            entry.type = tarfile.DIRTYPE
            tar.addfile(entry)
        _add_link(tar, "d/e/f/y", "../../..")
        _add_link(tar, "d/e/f/x", "y/../../..")
        _add_link(tar, "cells", "d/e/f/x/victim/cells")

    env = {**os.environ, "TMPDIR": str(tmpdir)}
    res = orch(tmp_path, "show", f"{evil}/{CELL}", env=env)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "link in the archive" in res.stderr and "refused" in res.stderr
    assert MARKER not in res.stdout + res.stderr and CELL not in res.stdout
    assert "Traceback" not in res.stderr
