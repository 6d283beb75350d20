"""The sampler ships to hosts: Python 3.8 syntax and nothing outside the standard library."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import orchestrator.runner.telemetry as telemetry

SOURCE = Path(telemetry.__file__)


def test_python_38_syntax_and_stdlib_imports_only() -> None:
    tree = ast.parse(SOURCE.read_text(), feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            imported.add((node.module or "").split(".")[0])
    assert imported, "no imports found: the check would be vacuous"
    outside = {m for m in imported if m not in sys.stdlib_module_names and m != "__future__"}
    assert not outside, f"telemetry.py imports {sorted(outside)}"
