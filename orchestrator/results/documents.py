"""The documents of a bundle as JSON: read strictly or noting problems, and checked against
the newest layout this orch reads (`layout.SCHEMA_VERSION`).

A document written by a newer orch is refused with one clear error, never half understood.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from orchestrator.errors import BundleError
from orchestrator.results.layout import CELL_JSON, CELLS_DIR, PLAN_JSON, RUN_JSON, SCHEMA_VERSION

DAMAGED = "the bundle is damaged or was not written by orch"


class BundleTooNew(BundleError):
    """A bundle written by a newer orch, whose layout this one cannot be sure to read."""


def check_schema(doc: Any, bundle: str | Path) -> None:
    """BundleTooNew when `doc` (run.json or cell.json) says a newer layout than this orch reads."""
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise BundleTooNew(
            f"bundle {bundle} was written by a newer orch (schema {version}, this orch reads up "
            f"to {SCHEMA_VERSION}); upgrade orch"
        )


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _mapping_of_mappings(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())


# What orch writes, per document: key -> (check, what it should be). A damaged or hand-made file
# with another type is reported by name instead of failing somewhere in a printer.
_RUN_JSON_TYPES: dict[str, tuple[Any, str]] = {
    **{k: (str, "a string") for k in ("run_id", "started", "finished", "playbook", "status")},
    "hosts": (_strings, "a list of host names"),
    "argv": (_strings, "a list of strings"),
    "cells": (_mapping_of_mappings, "a mapping of cell id to its record"),
}
_CELL_JSON_TYPES: dict[str, tuple[Any, str]] = {
    **{k: (str, "a string") for k in ("status", "reason", "failed_step")},
    "cell": (dict, "a mapping (the rendered cell)"),
    "steps": (_mapping_of_mappings, "a mapping of step to its record"),
}


def _type_problem(doc: dict[str, Any], types: dict[str, tuple[Any, str]]) -> str | None:
    for key, (check, what) in types.items():
        value = doc.get(key)
        if value is None:
            continue
        ok = isinstance(value, check) if isinstance(check, type) else check(value)
        if not ok:
            return f"{key!r} is not {what}"
    return None


def run_json_problem(doc: dict[str, Any]) -> str | None:
    """What in run.json does not have the type orch writes; None when all is well."""
    return _type_problem(doc, _RUN_JSON_TYPES)


def cell_json_problem(doc: dict[str, Any]) -> str | None:
    """What in cell.json does not have the type orch writes; None when all is well."""
    return _type_problem(doc, _CELL_JSON_TYPES)


def read_json(path: Path, *, required: bool = False) -> Any:
    """The JSON in `path`; None when absent and not required; BundleError when unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise BundleError(f"{path}: missing") from None
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: cannot read: {exc}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BundleError(f"{path}: not valid JSON: {exc}") from None


def read_json_noting(path: Path, problems: list[str]) -> Any:
    """The JSON in `path`, or None when missing; an unreadable file is noted in `problems`."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problems.append(f"{path}: unreadable: {exc}")
        return None


def is_run_dir(path: Path) -> bool:
    """True for a run folder (it holds run.json)."""
    return (path / RUN_JSON).is_file()


def is_cell_dir(path: Path) -> bool:
    """True for a cell folder (it holds cell.json)."""
    return (path / CELL_JSON).is_file()


def run_id_of_cell(cell_dir: Path) -> str | None:
    """The run id when the cell sits in a bundle (`<run>/cells/<cell>`), else None."""
    parent = cell_dir.parent
    if parent.name == CELLS_DIR:
        data = read_json_noting(parent.parent / RUN_JSON, [])
        if isinstance(data, dict) and data.get("run_id"):
            return str(data["run_id"])
        return parent.parent.name
    return None


def cell_dirs(run_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    """run.json (empty when unreadable) and the complete cells of a run folder, in run.json's
    order, then any others by name (dot-named temporaries skipped); BundleError without cells/."""
    cells_dir = run_dir / CELLS_DIR
    if not cells_dir.is_dir():
        raise BundleError(f"{run_dir}: not a run directory (no {CELLS_DIR}/)")
    run = read_json_noting(run_dir / RUN_JSON, [])
    check_schema(run, run_dir)
    run = run if isinstance(run, dict) else {}
    present = {p.name: p for p in cells_dir.iterdir() if p.is_dir() and not p.name.startswith(".")}
    recorded = run.get("cells")
    listed = [c for c in (recorded if isinstance(recorded, dict) else {}) if c in present]
    order = listed + sorted(n for n in present if n not in listed)
    return run, [present[name] for name in order]


def recorded_plan_cells(run_dir: Path) -> list[dict[str, Any]] | None:
    """plan.json's rendered cells of a run folder; None when it cannot be read."""
    try:
        plan = read_json(run_dir / PLAN_JSON)
    except BundleError:
        return None
    if not isinstance(plan, dict):
        return None
    check_schema(plan, run_dir)
    cells = plan.get("cells")
    return [c for c in cells if isinstance(c, dict)] if isinstance(cells, list) else []


def check_no_links(root: Path) -> None:
    """Refuse a bundle folder holding a symbolic link: orch never writes one (a link a bench
    left is recorded in links.json, not kept), and following one would read outside the
    bundle (`metrics.json -> /etc/shadow` in someone's folder). Packed bundles refuse links
    when they are unpacked."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            if path.is_symlink():
                raise BundleError(
                    f"{path}: a symbolic link inside a bundle: not followed, bundle refused",
                    hint="orch writes no links; this folder was changed after it was written",
                )
