"""The import graph of orchestrator/ only points down the layers docs/ARCHITECTURE.md draws."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "orchestrator"

# Bottom first: a module may import its own layer and the ones before it, never one after it.
LAYERS = (
    ("errors",),
    ("runner",),  # the host side: stdlib only, shipped as runner.pyz
    ("sim",),  # the simulated world (server, client, nvidia-smi, NCCL): stdlib only
    ("cell",),
    ("config",),
    ("results",),  # the bundle on disk: knows no plan
    ("adapters",),
    ("plan",),
    ("analyze",),
    ("execute",),
    ("cli", "__main__"),
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _layer_of(module: str) -> str:
    """`orchestrator.plan.build` -> `plan`; the package itself is `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every `orchestrator.*` module `path` imports, with its line, wherever the import sits."""
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("orchestrator.")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("orchestrator."):
            out.append((str(node.module), node.lineno))
    return out


def upward_imports() -> list[str]:
    """`file:line: a -> b` for each import from a lower layer into a higher one."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = _layer_of(_module_name(path))
        if here == "__init__":
            continue
        for target, line in _imports(path):
            there = _layer_of(target)
            if RANK[there] > RANK[here]:
                found.append(f"{path.relative_to(ROOT)}:{line}: {here} -> {there}")
    return found


def test_every_layer_is_placed() -> None:
    names = {p.name.removesuffix(".py") for p in PACKAGE.iterdir() if not p.name.startswith("_")}
    names -= {"py.typed"}
    assert names <= set(RANK), f"place these in LAYERS: {sorted(names - set(RANK))}"


def test_imports_only_point_down() -> None:
    assert upward_imports() == []


@pytest.mark.parametrize(
    "source", ["import orchestrator.cli\n", "from orchestrator.cli import x\n"]
)
def test_an_upward_import_is_found(tmp_path: Path, source: str) -> None:
    # the check itself can fail: an import from config up into cli is reported
    path = tmp_path / "m.py"
    path.write_text(source)
    assert [(t, line) for t, line in _imports(path)] == [(source.split()[1], 1)]
    assert RANK[_layer_of("orchestrator.cli")] > RANK[_layer_of("orchestrator.config.x")]


TRANSPORT = PACKAGE / "execute" / "transport"


def _asks_which_transport(node: ast.AST) -> bool:
    """`isinstance(x, SomethingConnection)` (or a tuple holding one)."""
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"):
        return False
    if len(node.args) != 2:
        return False
    kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
    names = [getattr(k, "id", None) or getattr(k, "attr", None) or "" for k in kinds]
    return any(name.endswith("Connection") for name in names)


def test_no_code_outside_the_transports_asks_which_transport_it_has() -> None:
    """A new executor is a module under execute/transport/: the apply engine, bisect and audit
    call the Connection's hooks instead of testing for a transport's class."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if TRANSPORT in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if _asks_which_transport(node):
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    assert found == [], found
