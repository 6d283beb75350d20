"""Inputs made to exhaust the machine end as one clear error (exit 2) in well under a second:
YAML alias bombs, and files that never end or are far too big (`-e @FILE`, `--limit @FILE`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PLAYBOOK = """\
name: t
hosts: all
vars:
{vars}
server:
  command: echo {{{{ x }}}}
bench:
  command: echo
"""


def orch(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "orchestrator", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)


def one_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def laughs(levels: int) -> str:
    """A billion-laughs `vars:` block: each level is ten aliases of the one before."""
    rows = ['  x: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    rows += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(rows)


@pytest.mark.parametrize("levels", [7, 9])
def test_a_yaml_alias_bomb_is_refused_at_the_alias(tmp_path: Path, levels: int) -> None:
    (tmp_path / "laughs.yml").write_text(PLAYBOOK.format(vars=laughs(levels)))
    message = one_error(orch(tmp_path, "validate", "laughs.yml"))
    # Line 9 is `l5: [*l4, ...]`: its first alias takes the expansion past the budget.
    assert message.startswith("error: laughs.yml:9:12: YAML alias *l4 expands the document"), (
        message
    )
    assert "200,000 values" in message


def test_anchors_aliases_and_merges_still_load(tmp_path: Path) -> None:
    text = PLAYBOOK.format(
        vars="  x: 1\n  base: &base {a: 1, b: [1, 2, 3]}\n"
        "  one: {<<: *base, c: 2}\n  two: [*base, *base, *base]"
    )
    (tmp_path / "ok.yml").write_text(text)
    proc = orch(tmp_path, "validate", "ok.yml")
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def playbook(tmp_path: Path) -> Path:
    (tmp_path / "ok.yml").write_text(PLAYBOOK.format(vars="  x: 1"))
    return tmp_path


def test_extra_vars_from_an_endless_device_are_refused(playbook: Path) -> None:
    message = one_error(orch(playbook, "validate", "ok.yml", "-e", "@/dev/zero"))
    assert "extra vars file is not a regular file (a device, FIFO or socket): /dev/zero" in message


def test_extra_vars_from_a_fifo_do_not_block(playbook: Path) -> None:
    os.mkfifo(playbook / "vars.fifo")  # nobody writes to it: reading would block for ever
    message = one_error(orch(playbook, "validate", "ok.yml", "-e", "@vars.fifo"))
    assert "extra vars file is not a regular file" in message


def test_a_vars_file_over_16_mib_is_refused_unread(playbook: Path) -> None:
    with open(playbook / "huge.yml", "wb") as out:
        out.truncate(16 * 1024 * 1024 + 1)  # sparse: no disk used
    message = one_error(orch(playbook, "validate", "ok.yml", "-e", "@huge.yml"))
    assert "error: huge.yml: extra vars file is larger than 16 MiB: huge.yml" in message


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("/dev/zero", "cannot read /dev/zero: limit file is not a regular file (a device, FIFO"),
        ("big.txt", "cannot read big.txt: limit file is larger than 1 MiB"),
        ("missing.txt", "cannot read missing.txt: limit file not found"),
    ],
)
def test_a_limit_file_is_read_within_bounds(playbook: Path, name: str, expected: str) -> None:
    (playbook / "big.txt").write_text("localhost\n" * 200_000)
    message = one_error(orch(playbook, "validate", "ok.yml", "--limit", f"@{name}"))
    assert "Invalid value for '-l' / '--limit'" in message
    assert expected in message


def test_a_limit_file_still_limits(playbook: Path) -> None:
    (playbook / "retry.txt").write_text("# failed last time\nlocalhost\n")
    proc = orch(playbook, "validate", "ok.yml", "--limit", "@retry.txt")
    assert proc.returncode == 0, proc.stderr
