"""The real `orch` command line as a user runs it, for the CLI tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_orch(
    cwd: Path,
    *args: str,
    home: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """`python -m orchestrator ARGS` in `cwd`; `home` (made if missing) becomes $HOME. A user's
    ORCH_RESULTS never reaches it."""
    clean = {k: v for k, v in os.environ.items() if k != "ORCH_RESULTS"}
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        clean["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
    )
