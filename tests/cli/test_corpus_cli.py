"""Every malformed input in tests/corpus/ gives one clear message through `orch validate`.

Each case is a directory with playbook.yml (optional inventory.yml and other files) and
expect.yml naming the file, line, column, key path and a substring of the message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator import cli

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CASES = (
    sorted(p for p in CORPUS.iterdir() if (p / "expect.yml").is_file()) if CORPUS.is_dir() else []
)


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 40, f"only {len(CASES)} bad-input cases under {CORPUS}"


def argv_for(case: Path) -> list[str]:
    """`orch validate` with the case's inventory and extra arguments."""
    expect = yaml.safe_load((case / "expect.yml").read_text())
    argv = ["validate", "playbook.yml"]
    if (case / "inventory.yml").exists():
        argv += ["-i", "inventory.yml"]
    elif (case / "inventory.json").exists():
        argv += ["-i", "inventory.json"]
    return argv + [str(a) for a in expect.get("args", [])]


def orch_in_process(
    argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """The CLI's own entry point, run in this process: its exit code and stderr. The cases
    differ only in their input, and a process start costs 0.5 s of imports each (82 cases);
    `test_a_real_process_says_the_same` shows a real `python -m orchestrator` says the same."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["orch", *argv])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        cli.run()
    code = exited.value.code
    return (code if isinstance(code, int) else 0), capsys.readouterr().err


def check_message(case: Path, returncode: int, stderr: str) -> None:
    """Exit 2, no traceback, one line `error: file:line:col: key.path: ...` as expect.yml says."""
    expect = yaml.safe_load((case / "expect.yml").read_text())
    assert returncode == 2, (returncode, stderr)
    assert "Traceback" not in stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    message = lines[0]
    where = f"{expect['file']}:{expect['line']}:{expect['col']}:"
    assert message.startswith("error: "), message
    assert where in message, (where, message)
    if expect.get("key_path"):
        assert f" {expect['key_path']}:" in message, (expect["key_path"], message)
    assert expect["contains"] in message, (expect["contains"], message)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_clear_message(
    case: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    check_message(case, *orch_in_process(argv_for(case), case, monkeypatch, capsys))


# One case of each kind: a playbook alone, with an inventory, with extra arguments.
REAL_PROCESS_CASES = [
    next(c for c in CASES if not (c / "inventory.yml").exists()),
    next(c for c in CASES if (c / "inventory.yml").exists()),
    next(c for c in CASES if yaml.safe_load((c / "expect.yml").read_text()).get("args")),
]


@pytest.mark.parametrize("case", REAL_PROCESS_CASES, ids=[c.name for c in REAL_PROCESS_CASES])
def test_a_real_process_says_the_same(
    case: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = argv_for(case)
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", *argv],
        cwd=case, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    check_message(case, proc.returncode, proc.stderr)
    assert (proc.returncode, proc.stderr) == orch_in_process(argv, case, monkeypatch, capsys)
