"""ansible-playbook flags answered with what orch does instead, and ORCH_RESULTS as the default
results folder of every command: through the real CLI, on real files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from cli_helpers import run_orch


def orch(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_orch(cwd, *args, home=cwd / "home", env=env)


@pytest.mark.parametrize(
    ("args", "answer"),
    [
        (
            ["apply", "pb.yml", "--check"],
            "--check is ansible-playbook's; orch's dry run is `orch plan",
        ),
        (["apply", "pb.yml", "-C"], "`orch plan PLAYBOOK`"),
        (["apply", "pb.yml", "--become"], "not needed: orch never escalates"),
        (["apply", "pb.yml", "-K"], "-K is ansible-playbook's; not needed: orch never escalates"),
        (["apply", "pb.yml", "--ask-become-pass"], "not needed: orch never escalates"),
        (["apply", "pb.yml", "--forks", "8"], "use --max-parallel N"),
        (["apply", "pb.yml", "--forks=8"], "--forks is ansible-playbook's; use --max-parallel N"),
        (["apply", "pb.yml", "-u", "bench"], "set ansible_user for the host in the inventory"),
        (["apply", "pb.yml", "--tags", "x"], "pick cells with --cells"),
        (["apply", "pb.yml", "--skip-tags", "x"], "--cells 'axis!=value'"),
        (["apply", "pb.yml", "--start-at-task", "x"], "--resume RUN"),
        (["apply", "pb.yml", "--diff"], "`orch diff A B`"),
        (["validate", "pb.yml", "--syntax-check"], "use `orch validate PLAYBOOK`"),
        (["plan", "pb.yml", "--list-hosts"], "use `orch plan PLAYBOOK`"),
    ],
)
def test_ansible_flags_say_what_orch_does_instead(
    tmp_path: Path, args: list[str], answer: str
) -> None:
    (tmp_path / "pb.yml").write_text("name: demo\nbench:\n  command: [echo, hi]\n")
    res = orch(tmp_path, *args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert answer in res.stderr, res.stderr
    assert "Did you mean" not in res.stderr
    assert not (tmp_path / "results").exists()  # nothing ran


def test_an_unknown_flag_that_is_not_ansibles_keeps_clicks_message(tmp_path: Path) -> None:
    res = orch(tmp_path, "apply", "pb.yml", "--bogus")
    assert res.returncode == 2 and "--bogus" in res.stderr and "ansible" not in res.stderr


def test_orch_results_is_the_default_folder_of_every_command(tmp_path: Path) -> None:
    playbook = {"name": "habits", "bench": {"command": ["{{ orch_python }}", "-c", "print(1)"]}}
    (tmp_path / "pb.yml").write_text(yaml.safe_dump(playbook))
    env = {"ORCH_RESULTS": str(tmp_path / "elsewhere")}
    done = orch(tmp_path, "apply", "pb.yml", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "results").exists()
    (run,) = [p for p in (tmp_path / "elsewhere").iterdir() if p.is_dir()]

    listed = orch(tmp_path, "runs", env=env)
    assert listed.returncode == 0 and run.name in listed.stdout, listed.stdout + listed.stderr
    shown = orch(tmp_path, "show", run.name, env=env)
    assert shown.returncode == 0, shown.stderr
    report = orch(tmp_path, "report", run.name, "--format", "json", env=env)
    assert report.returncode == 0, report.stderr
    json.loads(report.stdout)

    # --results and the positional folder of `orch runs` are the same thing
    for args in (["runs", "elsewhere"], ["runs", "--results", "elsewhere"]):
        res = orch(tmp_path, *args)
        assert res.returncode == 0 and run.name in res.stdout, res.stdout + res.stderr
    both = orch(tmp_path, "runs", "elsewhere", "--results", "results")
    assert both.returncode == 2 and "two folders given" in both.stderr


def test_a_run_id_not_in_the_default_folder_says_where_it_looked(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    res = orch(tmp_path, "show", "20260101-000000-nope")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no such run under results" in res.stderr and "ORCH_RESULTS" in res.stderr, res.stderr


def test_apply_resume_looks_for_the_run_in_orch_results(tmp_path: Path) -> None:
    playbook = {"name": "habits", "bench": {"command": ["{{ orch_python }}", "-c", "print(1)"]}}
    (tmp_path / "pb.yml").write_text(yaml.safe_dump(playbook))
    missing = orch(tmp_path, "apply", "pb.yml", "--resume", "20260101-000000-nope")
    assert missing.returncode == 2 and "ORCH_RESULTS=DIR" in missing.stderr, missing.stderr
    env = {"ORCH_RESULTS": "elsewhere"}
    assert orch(tmp_path, "apply", "pb.yml", env=env).returncode == 0
    (run,) = [p for p in (tmp_path / "elsewhere").iterdir() if p.is_dir()]
    again = orch(tmp_path, "apply", "pb.yml", "--resume", run.name, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"bundle: elsewhere/{run.name}" in again.stdout
