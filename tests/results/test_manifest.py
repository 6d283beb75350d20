"""MANIFEST.sha256: written last, and every change to a bundle is reported."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from results_helpers import make_cell_dir

from orchestrator.errors import BundleError
from orchestrator.results.manifest import (
    MANIFEST_NAME,
    bundle_files,
    read_manifest,
    verify_manifest,
    write_manifest,
)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"schema_version": 1}\n')
    make_cell_dir(run / "cells", "cell-a")
    make_cell_dir(run / "cells", ".cell-b.tmp")  # a write in progress: never listed
    (run / ".run.json.tmp").write_text("partial")
    write_manifest(run)
    return run


def test_untouched_bundle_verifies(run_dir: Path) -> None:
    report = verify_manifest(run_dir)
    assert report.ok and report.checked == len(bundle_files(run_dir)) > 10
    entries = read_manifest(run_dir)
    assert "run.json" in entries and "cells/cell-a/cell.json" in entries
    assert not any(".tmp" in rel for rel in entries) and MANIFEST_NAME not in entries
    lines = (run_dir / MANIFEST_NAME).read_text().splitlines()
    assert lines == sorted(lines, key=lambda ln: ln.split("  ", 1)[1])


def test_sha256sum_reads_the_manifest(run_dir: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("no sha256sum")
    res = subprocess.run(
        ["sha256sum", "--quiet", "-c", MANIFEST_NAME], cwd=run_dir, capture_output=True
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_tampered_missing_and_extra_files_are_reported(run_dir: Path) -> None:
    metrics = run_dir / "cells/cell-a/bench/1/stdout"
    metrics.write_text("output_throughput: 999.9\n")
    (run_dir / "cells/cell-a/setup.log").unlink()
    (run_dir / "cells/cell-a/planted.txt").write_text("new")
    (run_dir / "cells" / ".cell-c.tmp").mkdir()  # tmp dirs stay out of it
    report = verify_manifest(run_dir)
    assert not report.ok
    assert report.mismatched == ["cells/cell-a/bench/1/stdout"]
    assert report.missing == ["cells/cell-a/setup.log"]
    assert report.extra == ["cells/cell-a/planted.txt"]


def test_no_manifest_or_a_malformed_one_is_a_bundle_error(run_dir: Path) -> None:
    manifest = run_dir / MANIFEST_NAME
    manifest.write_text("not a manifest line\n")
    with pytest.raises(BundleError, match="malformed"):
        verify_manifest(run_dir)
    manifest.write_text(f"{'0' * 64}  ../../etc/passwd\n")
    with pytest.raises(BundleError, match="outside the bundle"):
        verify_manifest(run_dir)
    manifest.unlink()
    with pytest.raises(BundleError, match="no manifest") as exc:
        verify_manifest(run_dir)
    assert str(run_dir) in str(exc.value)
