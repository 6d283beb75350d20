"""A template in a matrix value would reach the command unrendered: `orch validate` refuses it
and its hints lead to a fix that works (issue 16's example, through the real CLI)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_helpers import run_orch

PLAYBOOK = """\
name: tpl
vars: {{seqs: 8}}
matrix:
  max_num_seqs: {axis}
server:
  adapter: vllm
  args:
    model: m
    max_num_seqs: "{{{{ matrix.max_num_seqs }}}}"
bench: {{command: [echo, hi]}}
"""


def orch(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_orch(cwd, *args, home=cwd)


@pytest.mark.parametrize(
    "axis", ['"{{ seqs }}"', '["{{ seqs }}"]', "[8, '{% if 1 %}9{% endif %}']"]
)
def test_a_templated_matrix_value_is_refused(tmp_path: Path, axis: str) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK.format(axis=axis))
    for command in ("validate", "plan"):
        res = orch(tmp_path, command, "pb.yml")
        assert res.returncode == 2, res.stdout + res.stderr
        assert "a matrix value is not a template" in res.stderr, res.stderr
        assert "pb.yml:4:" in res.stderr and "max_num_seqs: [8, 16]" in res.stderr
        assert "{{" not in res.stdout  # nothing rendered with a template left in it


def test_the_hint_for_a_scalar_axis_reads_back_as_yaml(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK.format(axis='"a: b"'))
    res = orch(tmp_path, "validate", "pb.yml")
    assert res.returncode == 2 and '(write max_num_seqs: ["a: b"])' in res.stderr, res.stderr
    # the hint, applied as written, validates and renders the value itself
    (tmp_path / "pb.yml").write_text(PLAYBOOK.format(axis='["a: b"]'))
    plan = orch(tmp_path, "plan", "-v", "pb.yml")
    assert plan.returncode == 0, plan.stderr
    assert "--max-num-seqs 'a: b'" in plan.stdout, plan.stdout


def test_the_suggested_fix_renders(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK.format(axis="[8, 16]"))
    plan = orch(tmp_path, "plan", "-v", "pb.yml")
    assert plan.returncode == 0, plan.stderr
    assert "--max-num-seqs 8 " in plan.stdout and "--max-num-seqs 16 " in plan.stdout
