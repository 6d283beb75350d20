"""`python -m orchestrator` is `orch`."""

from orchestrator.cli import run

run()
