"""A cell folder's names are named once, in runner/layout.py: the controller's results/layout.py
re-exports them, and the runner's copy stays shippable (standard library only)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from orchestrator.results import layout as results_layout
from orchestrator.runner import layout as runner_layout

SOURCE = Path(runner_layout.__file__)


def _defined_names() -> list[str]:
    """The public names runner/layout.py assigns at its top level."""
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    return [
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and not target.id.startswith("_")
    ]


def test_results_layout_reexports_every_cell_name() -> None:
    names = _defined_names()
    assert "CELL_JSON" in names and "EXIT_JSON" in names
    for name in names:
        assert getattr(results_layout, name, None) == getattr(runner_layout, name), name


def test_runner_layout_imports_only_the_standard_library() -> None:
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    imported = [
        alias.name if isinstance(node, ast.Import) else (node.module or "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    outside = [n for n in imported if n.split(".")[0] not in sys.stdlib_module_names]
    assert outside == []
