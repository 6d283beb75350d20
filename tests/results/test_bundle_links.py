"""A packed cell or run cannot smuggle a link that points beside its own folder."""

import io
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
    with pytest.raises(BundleError, match="link out of the archive's folder"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_link_inside_the_top_folder_is_kept(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "b.tar.gz", "cell.json")
    out = extract_archive(archive, tmp_path / "out")
    assert (out / "x").is_symlink() and (out / "x").resolve() == (out / "cell.json").resolve()
