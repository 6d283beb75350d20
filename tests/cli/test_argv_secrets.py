"""run.json records the command line that made the run, with every secret `-e` value hidden by
name, however short (issue 23, item 12): through the real CLI, on the local host."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from cli_helpers import run_orch


def test_short_secret_extra_vars_never_reach_run_json(tmp_path: Path) -> None:
    playbook = {
        "name": "argv",
        "env": {"DB_PASSWORD": "{{ db_password }}", "MY_SECRET": "{{ my_secret }}"},
        "bench": {"command": ["echo", "x 1"], "metrics": {"x": r"x ([0-9]+)"}},
        "snapshot": {"pip_freeze": False, "topo": False},
    }
    (tmp_path / "pb.yml").write_text(yaml.safe_dump(playbook))
    proc = run_orch(
        tmp_path,
        "apply",
        "pb.yml",
        "-e",
        "my_secret=xy7",
        "-e",
        '{"db_password": "abc12"}',
        "--results",
        "results",
        home=tmp_path / "home",
    )
    assert proc.returncode == 0, proc.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    argv = json.loads((run / "run.json").read_text())["argv"]
    text = json.dumps(argv)
    assert "xy7" not in text and "abc12" not in text, argv
    assert "my_secret=***REDACTED***" in argv and "pb.yml" in argv
    assert json.loads(argv[argv.index("-e", argv.index("-e") + 1) + 1]) == {
        "db_password": "***REDACTED***"
    }
