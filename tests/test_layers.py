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
    ("cell", "cell_ids", "container_pin"),  # container_pin: the Cell's image pin, beside it
    ("config",),
    ("secrets",),  # the name rule, every source of secret values, redaction of every shape
    ("results",),  # the bundle on disk: knows no plan
    ("adapters",),
    ("plan",),
    ("analyze",),
    ("execute",),
    ("app",),  # a Plan and the services on it (apply, bisect): callable without the CLI
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


# Inside execute/, the same rule one level down: transports at the bottom, then what ships and
# pins, the apply engine, the workflows built on it.
EXECUTE_LAYERS = (
    ("transport",),
    ("ship", "machine", "secret_values", "refs", "images"),
    ("apply",),
    ("facts", "replay", "bisect"),
    ("audit",),
    ("investigate",),  # re-measures as audit does, then bisects
)
EXECUTE_RANK = {name: rank for rank, names in enumerate(EXECUTE_LAYERS) for name in names}
EXECUTE = PACKAGE / "execute"


def _execute_part(module: str) -> str | None:
    """`orchestrator.execute.apply.run` -> `apply`; None outside execute/."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "execute" else None


def test_every_part_of_execute_is_placed() -> None:
    names = {p.name.removesuffix(".py") for p in EXECUTE.iterdir() if p.name[0] != "_"}
    unplaced = sorted(names - set(EXECUTE_RANK))
    assert unplaced == [], f"place in EXECUTE_LAYERS: {unplaced}"


def test_inside_execute_imports_only_point_down() -> None:
    found = []
    for path in sorted(EXECUTE.rglob("*.py")):
        here = _execute_part(_module_name(path))
        if here is None:
            continue
        for target, line in _imports(path):
            there = _execute_part(target)
            if there is not None and EXECUTE_RANK[there] > EXECUTE_RANK[here]:
                found.append(f"{path.relative_to(ROOT)}:{line}: {here} -> {there}")
    assert found == []


def import_graph() -> dict[str, set[str]]:
    """module -> the orchestrator modules it imports (a package's __init__ by its name), every
    import counted, those under TYPE_CHECKING and inside functions too."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                # `from orchestrator.runner import probe` imports the module `probe`
                named = {f"{node.module}.{a.name}" for a in node.names}
                targets |= {n if n in paths else str(node.module) for n in named}
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    """Two modules that need each other are one idea split badly: a Protocol in the lower one
    says what it needs of the other (`RunPort`, `RunSource`, the simulator's server views)."""
    assert cycles(import_graph()) == []


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert long == {}


def test_no_prefix_families() -> None:
    """Three modules of one folder named `x_*` want a package `x/` (a module and one companion,
    like `vllm.py` and `vllm_log.py`, are fine)."""
    families: dict[tuple[Path, str], list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if not path.name.startswith("_"):
            families.setdefault((path.parent, path.stem.split("_")[0]), []).append(path.stem)
    assert [sorted(names) for names in families.values() if len(names) >= 3] == []
