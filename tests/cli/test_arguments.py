"""Bad command-line arguments: one `error:` line, exit 2, nothing run, through the real CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import run_orch

PLAYBOOK = "name: demo\nbench:\n  command: [echo, hi]\n"


orch = run_orch


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["apply", "pb.yml", "--bogus"],
            # click < 8.4 words it "No such option: --bogus"
            re.compile(r"error: No such option:? '?--bogus'?\.? \(see 'orch apply --help'\)"),
        ),
        (["report"], "error: Missing argument 'REF'. (see 'orch report --help')"),
        (
            ["apply", "pb.yml", "--max-parallel", "0"],
            "error: Invalid value for '--max-parallel': 0 is not in the range x>=1."
            " (see 'orch apply --help')",
        ),
        (
            ["apply", "pb.yml", "--results", "a-file"],
            "error: Invalid value for '--results': Directory 'a-file' is a file."
            " (see 'orch apply --help')",
        ),
        (
            ["bisect", "pb.yml", "--repeats", "0"],
            "error: Invalid value for '--repeats': 0 is not in the range x>=1."
            " (see 'orch bisect --help')",
        ),
        (
            ["bisect", "pb.yml", "--end-repeats", "1"],
            "error: Invalid value for '--end-repeats': 1 is not in the range x>=2."
            " (see 'orch bisect --help')",
        ),
        (
            ["runs", "nowhere"],
            "error: nowhere does not exist (give the folder that holds the run bundles,"
            " where `orch apply --results` wrote)",
        ),
        (["runs", "a-file"], "error: a-file is not a directory (give the folder that holds"),
        (["audit", "r", "--tolerance", "150%"], "error: tolerance '150%' must be between"),
        (["audit", "r", "--tolerance", "150"], "(did you mean 150%?)"),
    ],
)
def test_a_bad_argument_is_one_line_and_nothing_runs(
    tmp_path: Path, args: list[str], message: str | re.Pattern[str]
) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    (tmp_path / "a-file").write_text("")
    proc = orch(tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    if isinstance(message, re.Pattern):
        assert message.search(lines[0]), proc.stderr
    else:
        assert message in lines[0], proc.stderr
    assert lines[0].startswith("error: ")
    assert "%%" not in lines[0]
    assert not (tmp_path / "results").exists()  # nothing ran, no run directory was made


def test_orch_alone_prints_its_help_and_runs_alone_says_no_runs_yet(tmp_path: Path) -> None:
    bare = orch(tmp_path)
    assert bare.stderr.startswith("Usage: orch [OPTIONS] COMMAND") or bare.stdout.startswith(
        "Usage: orch [OPTIONS] COMMAND"
    ), bare
    assert "error:" not in bare.stdout + bare.stderr
    for args in ([], ["results"]):  # the default results/ does not exist yet: no runs, exit 0
        fresh = orch(tmp_path, "runs", *args)
        assert fresh.returncode == 0 and fresh.stdout.strip() == "no runs under results", fresh


def test_limit_reads_a_retry_file_as_ansible_does(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK.replace("name: demo\n", "name: demo\nhosts: gpus\n"))
    (tmp_path / "inv.yml").write_text("gpus:\n  hosts:\n    g1:\n    g2:\n    g3:\n")
    (tmp_path / "retry").write_text("g3\n# from the last run\n\ng1\n")
    proc = orch(tmp_path, "plan", "pb.yml", "-i", "inv.yml", "--limit", "@retry", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [c["host"] for c in json.loads(proc.stdout)] == ["g1", "g3"]
    missing = orch(tmp_path, "plan", "pb.yml", "-i", "inv.yml", "--limit", "@nope")
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1, missing.stderr
    assert "cannot read nope" in missing.stderr
