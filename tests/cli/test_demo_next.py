"""scripts/demo.sh's "Next, try" (scripts/demo_next.sh) keeps the user's own -e/--results/-i/
--limit, shell-quoted: the suggested bisect, pasted into a shell, gets the apply's options."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NEXT = ROOT / "scripts" / "demo_next.sh"


def _next(run: Path, *user_args: str) -> dict[str, list[str]]:
    res = subprocess.run(
        ["bash", str(NEXT), str(run), "/tmp/a repo", ".venv/bin/orch", *user_args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    lines = [shlex.split(line) for line in res.stdout.splitlines() if ".venv/bin/orch" in line]
    return {words[1]: words[2:] for words in lines}


def test_the_suggested_commands_keep_the_users_options_as_typed(tmp_path: Path) -> None:
    run = tmp_path / "my results" / "20261201-demo"
    (run / "cells" / "good-tuned-eagle3-2-abcd").mkdir(parents=True)
    (run / "cells" / "bad-tuned-eagle3-2-ef01").mkdir(parents=True)
    (run / "cells" / "bad-default-eagle3-2-9a9a").mkdir(parents=True)
    user = [
        "-e",
        "port=8123",
        "--results",
        str(tmp_path / "my results"),
        "--max-parallel",  # apply's own: not bisect's
        "2",
        "-e",
        '{"note": "it\'s $HOME"}',
        "--extra-vars=x=1",
        "-i",
        "hosts.yml",
    ]
    cmds = _next(run, *user)
    assert cmds["bisect"] == [
        "playbooks/demo.yml",
        "-e",
        "sim_repo=/tmp/a repo",
        "-e",
        "port=8123",
        "--results",
        str(tmp_path / "my results"),
        "-e",
        '{"note": "it\'s $HOME"}',
        "--extra-vars=x=1",
        "-i",
        "hosts.yml",
        "--cell",
        "nccl=tuned,spec=eagle3-2",
        "--good",
        "good",
        "--bad",
        "bad",
    ]
    assert cmds["show"] == [str(run)] and cmds["audit"] == [str(run)]
    assert cmds["diff"] == [
        str(run / "cells" / "good-tuned-eagle3-2-abcd"),
        str(run / "cells" / "bad-tuned-eagle3-2-ef01"),
    ]
    # investigate gets where results and hosts are, never the playbook's -e
    assert cmds["investigate"] == [
        str(run / "cells" / "good-tuned-eagle3-2-abcd"),
        str(run / "cells" / "bad-default-eagle3-2-9a9a"),
        "--results",
        str(tmp_path / "my results"),
        "-i",
        "hosts.yml",
    ]


def test_without_options_the_bisect_is_the_plain_one(tmp_path: Path) -> None:
    cmds = _next(tmp_path)
    assert cmds["bisect"][:3] == ["playbooks/demo.yml", "-e", "sim_repo=/tmp/a repo"]
    assert cmds["bisect"][3] == "--cell"
