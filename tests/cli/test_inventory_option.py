"""`-i` through the real CLI: a directory, and repeated -i combined into one inventory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PLAYBOOK = "name: demo\nhosts: gpus\nbench:\n  command: [echo, '{{ inventory_hostname }}']\n"


def plan(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "plan", "pb.yml", "--json", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_directory_and_a_file_make_one_inventory(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "hosts.yml").write_text("gpus:\n  hosts:\n    g1:\n")
    (tmp_path / "extra.yml").write_text("gpus:\n  hosts:\n    g2:\n")

    both = plan(tmp_path, "-i", "site", "-i", "extra.yml")
    assert both.returncode == 0, both.stderr
    cells = json.loads(both.stdout)
    assert [(c["host"], c["bench"]["argv"]) for c in cells] == [
        ("g1", ["echo", "g1"]),
        ("g2", ["echo", "g2"]),
    ]

    one = plan(tmp_path, "-i", "site")
    assert one.returncode == 0, one.stderr
    assert [c["host"] for c in json.loads(one.stdout)] == ["g1"]


def test_an_empty_directory_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    (tmp_path / "inv").mkdir()
    proc = plan(tmp_path, "-i", "inv")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[0] == (
        "error: inv: inventory directory inv holds no inventory files"
        " (put a YAML or JSON inventory such as hosts.yml in it; group_vars/, host_vars/ and"
        " ignored extensions (.md, .cfg, .bak, ...) do not count)"
    )
    assert "Traceback" not in proc.stderr
