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

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CASES = (
    sorted(p for p in CORPUS.iterdir() if (p / "expect.yml").is_file()) if CORPUS.is_dir() else []
)


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 40, f"only {len(CASES)} bad-input cases under {CORPUS}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_clear_message(case: Path, tmp_path: Path) -> None:
    expect = yaml.safe_load((case / "expect.yml").read_text())
    argv = [sys.executable, "-m", "orchestrator", "validate", "playbook.yml"]
    if (case / "inventory.yml").exists():
        argv += ["-i", "inventory.yml"]
    elif (case / "inventory.json").exists():
        argv += ["-i", "inventory.json"]
    argv += [str(a) for a in expect.get("args", [])]
    proc = subprocess.run(argv, cwd=case, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    message = lines[0]
    where = f"{expect['file']}:{expect['line']}:{expect['col']}:"
    assert message.startswith("error: "), message
    assert where in message, (where, message)
    if expect.get("key_path"):
        assert f" {expect['key_path']}:" in message, (expect["key_path"], message)
    assert expect["contains"] in message, (expect["contains"], message)
