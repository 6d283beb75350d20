"""Issue 10 item 5: `orch replay` of a bundle made elsewhere shows what it would run and runs it
only with --yes; without a terminal and without --yes it exits 2 and nothing runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

BENCH = "print('x 1.0')  # replay-marker"


def _orch(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp / "home").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=tmp,
        env={**os.environ, "HOME": str(tmp / "home")},
        stdin=subprocess.DEVNULL,  # no terminal: nobody to ask
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _edit_run_json(run: Path, **changes: object) -> None:
    doc = json.loads((run / "run.json").read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    (run / "run.json").write_text(json.dumps(doc))


def _replays(tmp: Path) -> list[Path]:
    folder = tmp / "replays"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_a_foreign_bundle_needs_yes(tmp_path: Path) -> None:
    playbook = {
        "name": "replay-foreign",
        "bench": {
            "command": ["{{ orch_python }}", "-c", BENCH],
            "metrics": {"x": r"x ([0-9.]+)"},
        },
        "snapshot": {"pip_freeze": False, "topo": False},
    }
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    made = _orch(tmp_path, "apply", "playbook.yml", "--results", "results")
    assert made.returncode == 0, made.stdout + made.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    assert json.loads((run / "run.json").read_text())["machine_id"].startswith("sha256:")
    (cell,) = (p.name for p in (run / "cells").iterdir())
    ref = f"{run}/{cell}"

    here = _orch(tmp_path, "replay", ref, "--results", "replays")
    assert here.returncode == 0, here.stdout + here.stderr  # made here: no question asked
    assert len(_replays(tmp_path)) == 1

    for machine in ("sha256:0123456789abcdef", None):  # another machine's, or no record at all
        _edit_run_json(run, machine_id=machine)
        refused = _orch(tmp_path, "replay", ref, "--results", "replays")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.startswith(f"error: {ref} was made on another machine")
        assert f"cell {cell} on localhost (this machine):" in refused.stderr
        assert "bench: " in refused.stderr and "replay-marker" in refused.stderr
        assert "then pass --yes to run it:" in refused.stderr.splitlines()[0]
        assert "Traceback" not in refused.stderr
        assert len(_replays(tmp_path)) == 1  # nothing ran

    confirmed = _orch(tmp_path, "replay", ref, "--results", "replays", "--yes")
    assert confirmed.returncode == 0, confirmed.stdout + confirmed.stderr
    assert "replaying a bundle made on another machine" in confirmed.stdout
    assert "replay-marker" in confirmed.stdout
    assert len(_replays(tmp_path)) == 2


def test_replay_help_documents_yes(tmp_path: Path) -> None:
    shown = _orch(tmp_path, "replay", "--help")
    assert shown.returncode == 0
    assert "--yes" in shown.stdout and "another machine" in shown.stdout


def test_on_a_terminal_a_foreign_bundle_is_shown_and_a_no_runs_nothing(tmp_path: Path) -> None:
    import pty

    playbook = {
        "name": "replay-tty",
        "bench": {"command": ["{{ orch_python }}", "-c", BENCH], "metrics": {"x": r"x ([0-9.]+)"}},
        "snapshot": {"pip_freeze": False, "topo": False},
    }
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    made = _orch(tmp_path, "apply", "playbook.yml", "--results", "results")
    assert made.returncode == 0, made.stdout + made.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    _edit_run_json(run, machine_id=None)
    (cell,) = (p.name for p in (run / "cells").iterdir())

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "replay", f"{run}/{cell}", "--results", "replays"],
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path / "home")},
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    shown = b""
    while b"Run these commands?" not in shown:
        chunk = os.read(leader, 4096)
        assert chunk, shown
        shown += chunk
    os.write(leader, b"n\n")
    assert proc.wait(timeout=60) == 2
    try:
        while chunk := os.read(leader, 4096):
            shown += chunk
    except OSError:  # the terminal closes with the process
        pass
    os.close(leader)
    text = shown.decode(errors="replace")
    assert "replaying it runs:" in text and "replay-marker" in text, text
    assert "replay declined" in text, text
    assert _replays(tmp_path) == []
