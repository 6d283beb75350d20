"""A packed cell or run holds no links: every link is refused, even one that looks inside."""

import io
import os
import re
import tarfile
from pathlib import Path

import pytest

from orchestrator.errors import BundleError
from orchestrator.results.archive import extract_archive


def _archive(path: Path, link_target: str) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        top = tarfile.TarInfo("cell")
        top.type = tarfile.DIRTYPE
        tar.addfile(top)
        data = b"{}"
        info = tarfile.TarInfo("cell/cell.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("cell/x")
        link.type = tarfile.SYMTYPE
        link.linkname = link_target
        tar.addfile(link)
    return path


def test_link_beside_the_top_folder_is_refused(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "a.tar.gz", "../y")
    with pytest.raises(
        BundleError, match=re.escape("link in the archive: cell/x -> ../y: refused")
    ):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_link_inside_the_top_folder_is_refused_too(tmp_path: Path) -> None:
    # Issue 10 item 14: bundles orch writes need no links, so a safe-looking one is refused too
    # (this test asserted it was kept before).
    archive = _archive(tmp_path / "b.tar.gz", "cell.json")
    with pytest.raises(
        BundleError, match=re.escape("link in the archive: cell/x -> cell.json: refused")
    ):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_hard_link_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "h.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = b"{}"
        info = tarfile.TarInfo("cell/cell.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("cell/metrics.json")
        link.type = tarfile.LNKTYPE
        link.linkname = "cell/cell.json"
        tar.addfile(link)
    with pytest.raises(BundleError, match=re.escape("link in the archive: cell/metrics.json")):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_pack_stores_hard_links_whole_and_refuses_symlinks(tmp_path: Path) -> None:
    from orchestrator.results.archive import pack

    run = tmp_path / "r1"
    (run / "cells").mkdir(parents=True)
    (run / "run.json").write_text('{"run_id": "r1"}')
    os.link(run / "run.json", run / "cells" / "copy.json")
    packed = extract_archive(pack(run, tmp_path), tmp_path / "out")
    assert (packed / "cells" / "copy.json").read_text() == '{"run_id": "r1"}'

    (run / "cells" / "x").symlink_to("../run.json")
    with pytest.raises(BundleError, match="a packed run holds no links"):
        pack(run, tmp_path / "again.tar.gz")
    assert not (tmp_path / "again.tar.gz").exists()
