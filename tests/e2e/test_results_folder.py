"""A results folder that cannot be written is a clear error, never a traceback (issue 10, 16).

Read-only or unwritable: refused before anything runs (exit 2, the folder and why). Full in the
middle of a run: the run goes on, ends with exit 1 naming the cells not recorded and the
`--resume` command, and that resume (space freed) collects them from the host unrun.
A read-only or full folder needs a mount of our own: as root, a small tmpfs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bundle_helpers import orch

ROOT_ONLY = "mounting a small tmpfs (read-only or full folder) needs root"
# Each cell leaves 150 KB of incompressible data: two fit in 400 KB, the third does not. No `@`
# in it: random bytes hold `x://...@` about once in 200 blobs, and the redactor rightly masks
# that as URL credentials (a leak is worse than a damaged blob), which changed the size.
PLAYBOOK = """\
name: fill
matrix:
  n: [1, 2, 3, 4]
bench:
  command: ["{{ orch_python }}", "-c", "import os; open('blob.bin', 'wb').write(os.urandom(150000).replace(b'@', b'A')); print('x 1')"]
  metrics: {x: 'x ([0-9]+)'}
"""  # noqa: E501


SMALL = """\
name: small
bench:
  command: ["{{ orch_python }}", "-c", "print('x 1')"]
  metrics: {x: 'x ([0-9]+)'}
"""


def _is_root() -> bool:
    return os.geteuid() == 0


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """An empty 400 KB tmpfs, unmounted at the end."""
    if not _is_root():
        if os.environ.get("CI"):
            pytest.fail(f"{ROOT_ONLY}; CI runs as root")
        pytest.skip(ROOT_ONLY)
    mount = tmp_path / "mnt"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _playbook(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK)


def _clear_refusal(result: subprocess.CompletedProcess[str], code: int) -> str:
    out = result.stdout + result.stderr
    assert result.returncode == code, out
    assert "Traceback" not in out and "internal error" not in out, out
    return result.stderr


def test_a_read_only_results_folder_is_refused_before_anything_runs(
    tmp_path: Path, tmpfs: Path
) -> None:
    (tmp_path / "small.yml").write_text(SMALL)
    first = orch("apply", "small.yml", "--results", str(tmpfs), cwd=tmp_path, home=tmp_path)
    assert first.returncode == 0, first.stderr
    (bundle,) = (p for p in tmpfs.iterdir() if p.is_dir() and not p.name.startswith("."))
    shutil.rmtree(tmp_path / ".orch")
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    _playbook(tmp_path)
    for results in (tmpfs, tmpfs / "deeper"):
        result = orch("apply", "pb.yml", "--results", str(results), cwd=tmp_path, home=tmp_path)
        err = _clear_refusal(result, 2)
        assert f"error: {results}: cannot write the results folder: read-only file system" in err
        assert "run " not in err  # refused before a run id was handed out
    # a resume too, before its run lock is taken in the bundle
    again = orch(
        "apply", "small.yml", "--results", str(tmpfs), "--resume", str(bundle),
        cwd=tmp_path, home=tmp_path,
    )  # fmt: skip
    err = _clear_refusal(again, 2)
    assert f"error: {bundle}: cannot write the results folder: read-only file system" in err
    assert not (tmp_path / ".orch").exists()  # the runner was never started


def test_an_unwritable_results_folder_is_refused_before_anything_runs(tmp_path: Path) -> None:
    _playbook(tmp_path)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the results folder should be\n")
    result = orch("apply", "pb.yml", "--results", str(blocked / "r"), cwd=tmp_path, home=tmp_path)
    err = _clear_refusal(result, 2)
    assert "cannot write the results folder: not a directory" in err
    if _is_root():
        return  # root writes through mode bits: the read-only mount above is its case
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    result = orch("apply", "pb.yml", "--results", str(locked), cwd=tmp_path, home=tmp_path)
    err = _clear_refusal(result, 2)
    assert f"error: {locked}: cannot write the results folder: permission denied" in err


def test_a_full_results_folder_names_what_was_not_recorded_and_resume_collects_it(
    tmp_path: Path, tmpfs: Path
) -> None:
    _playbook(tmp_path)
    result = orch("apply", "pb.yml", "--results", str(tmpfs), cwd=tmp_path, home=tmp_path)
    err = _clear_refusal(result, 1)
    (bundle,) = (p for p in tmpfs.iterdir() if p.is_dir() and not p.name.startswith("."))
    recorded = sorted(p.name for p in (bundle / "cells").iterdir())
    assert not any(name.startswith(".") for name in recorded)  # no half cell left behind
    assert 0 < len(recorded) < 4, recorded
    missing = [f"{n}-" for n in "1234" if not any(r.startswith(f"{n}-") for r in recorded)]
    assert "no space left on device" in err
    line = next(line for line in err.splitlines() if line.startswith("error: "))
    assert f"{len(missing)} cell(s) not recorded: " in line
    for prefix in missing:
        assert f" {prefix}" in line.split("not recorded:")[1]
    resume = f"--resume {bundle}"
    assert resume in line
    assert not (bundle / "MANIFEST.sha256").exists()  # a bundle with gaps is not vouched for

    subprocess.run(["mount", "-o", "remount,size=4m", str(tmpfs)], check=True)
    resumed_at = time.time()
    again = orch(
        "apply", "pb.yml", "--results", str(tmpfs), "--resume", str(bundle),
        cwd=tmp_path, home=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    cells = sorted(p.name for p in (bundle / "cells").iterdir())
    assert len(cells) == 4 and not any(c.startswith(".") for c in cells), cells
    run = json.loads((bundle / "run.json").read_text())
    assert run["status"] == "passed"
    assert {c["status"] for c in run["cells"].values()} == {"passed"}
    # collected from the host, not run again: every cell finished before the resume began
    for name in cells:
        cell = json.loads((bundle / "cells" / name / "cell.json").read_text())
        assert cell["finished"] < resumed_at, name
        assert (bundle / "cells" / name / "bench" / "1" / "blob.bin").stat().st_size == 150000
    assert (bundle / "MANIFEST.sha256").exists()
