"""`--resume`: which run a resume continues, whether it may, and the command that resumes it.

A resume must plan the cells the run holds; the commands printed to the user (after Ctrl-C, a
refused resume, a bisect's missing metric) are whole and runnable, with secrets hidden.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import BundleError, InputError
from orchestrator.results.documents import check_schema, is_run_dir, read_json, recorded_plan_cells
from orchestrator.results.layout import RUN_JSON
from orchestrator.secrets.redact import hide_secret_extra_vars


def resume_target(resume: str, results_dir: Path) -> tuple[Path, str]:
    """(results folder, run id) that `--resume RUN` names: a run directory or a run id."""
    path = Path(resume)
    if path.is_dir():
        results_dir, run_id = path.parent, path.name
    else:
        run_id = resume
    if not is_run_dir(results_dir / run_id):
        raise InputError(
            f"no run {run_id!r} under {results_dir}",
            hint="`orch runs` lists the runs; --results DIR or ORCH_RESULTS=DIR name another "
            "folder",
        )
    return results_dir, run_id


def check_resume_plan(run_dir: Path, planned_ids: Sequence[str]) -> None:
    """Refuse a resume whose arguments plan other cells than the run holds.

    Resuming with a different inventory, -e or --limit would mix two experiments in one bundle.
    """
    recorded = recorded_plan_cells(run_dir)
    try:
        run = read_json(run_dir / RUN_JSON)
    except BundleError:
        return
    check_schema(run, run_dir)
    if recorded is None or not isinstance(run, dict):
        return
    original = run.get("argv") or []
    known = {c.get("id") for c in recorded}
    new = [cid for cid in planned_ids if cid not in known]
    if new:
        # run.json's argv holds only the marker for a secret: the user gives the value again.
        raise InputError(
            f"these arguments plan {len(new)} cell(s) that run {run_dir.name} does not hold "
            f"(e.g. {new[0]}): a resume must use the run's own playbook, inventory, -e and --limit",
            hint=f"resume with: {resume_command(original, run_dir)}",
        )


def resume_command(argv: Sequence[str], run_dir: str | Path) -> str:
    """`argv` resuming `run_dir` (any `--resume` of its own dropped), as printed to the user:
    a secret -e value shows as `<secret>`, with the note to give it again."""
    shown = resume_hint(shlex.join([*without_option(argv, "--resume"), "--resume", str(run_dir)]))
    return shown + (" (give each <secret> its value again)" if "<secret>" in shown else "")


def without_option(argv: Sequence[str], *names: str) -> list[str]:
    """argv with every `NAME X` / `NAME=X` of the given option names removed."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        elif not any(arg.startswith(f"{name}=") for name in names):
            out.append(arg)
    return out


def resume_hint(command: str) -> str:
    """A resume command line to print: each secret `-e` value as `<secret>`, to give again.

    `command` is shell-quoted, with `--resume RUN`; when RUN is a run directory, the names its
    cells list as secret (`secrets:`) count besides the name patterns. Cell ids do not depend on
    secret values, so any value given again plans the same cells.
    """
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    names: set[str] = set()
    if "--resume" in argv[:-1]:
        try:
            cells = recorded_plan_cells(Path(argv[argv.index("--resume") + 1])) or []
        except BundleError:
            cells = []
        for cell in cells:
            if isinstance(cell, dict):
                names.update(str(n) for n in cell.get("secrets") or ())
    return shlex.join(hide_secret_extra_vars(argv, names))
