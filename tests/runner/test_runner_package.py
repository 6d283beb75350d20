"""The host side stays shippable: Python 3.8 syntax, standard library only, one runner.pyz that
runs on its own and is built byte for byte the same every time."""

from __future__ import annotations

import ast
import glob
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from runner_helpers import RUNNER, RUNNER_PYZ, cell_dir, free_port, load, make_cell, run_cell

import orchestrator.runner
from orchestrator.execute.ship import (
    MANIFEST_NAME,
    runner_archive,
    runner_hash,
    unpacked_runner,
    write_runner,
)

PACKAGE = Path(orchestrator.runner.__file__).parent
MODULES = sorted(PACKAGE.rglob("*.py"))
# Cheap to spot and new after 3.8: str.removeprefix/removesuffix (3.9), functools.cache (3.9),
# zip(strict=) (3.10), datetime.UTC (3.11), typing.Self (3.11), math.lcm (3.9).
POST_38_ATTRIBUTES = {"removeprefix", "removesuffix", "cache", "UTC", "Self", "lcm"}
POST_38_KEYWORDS = {("zip", "strict")}
BUILTIN_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}
POST_38_TYPING = {"Self", "TypeAlias", "ParamSpec", "TypeGuard", "Annotated", "Never"}


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (not evaluated under `from __future__ import
    annotations`, so builtin generics are harmless there)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        roots: list[ast.AST | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            roots += [a.annotation for a in every if a is not None] + [node.returns]
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        for root in roots:
            if root is not None:
                inside.update(id(n) for n in ast.walk(root))
    return inside


def _problems(path: Path) -> list[str]:
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source, filename=str(path), feature_version=(3, 8))
    except SyntaxError as exc:
        return [f"{path.name}:{exc.lineno}: not Python 3.8 syntax: {exc.msg}"]
    future = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and n.names[0].name == "annotations"
        for n in tree.body
    )
    in_annotation = _annotation_nodes(tree) if future else set()
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [] if node.level else [node.module or ""]
                if node.level:
                    found.append(f"{where}: relative import")
                if node.module == "typing":
                    for alias in node.names:
                        if alias.name in POST_38_TYPING:
                            found.append(f"{where}: typing.{alias.name} is newer than Python 3.8")
            for name in names:
                top = name.split(".")[0]
                ours = name == "orchestrator.runner" or name.startswith("orchestrator.runner.")
                if not ours and top not in sys.stdlib_module_names and top != "__future__":
                    found.append(f"{where}: imports {name}, neither stdlib nor orchestrator.runner")
        elif isinstance(node, ast.Attribute) and node.attr in POST_38_ATTRIBUTES:
            found.append(f"{where}: .{node.attr} is newer than Python 3.8")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            for kw in node.keywords:
                if (node.func.id, kw.arg) in POST_38_KEYWORDS:
                    found.append(f"{where}: {node.func.id}({kw.arg}=) is newer than Python 3.8")
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in BUILTIN_GENERICS
            and id(node) not in in_annotation
        ):
            found.append(f"{where}: {node.value.id}[...] is evaluated, and fails on Python 3.8")
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.BitOr)
            and id(node) not in in_annotation
            and any(
                isinstance(s, ast.Constant) and s.value is None for s in (node.left, node.right)
            )
        ):
            found.append(f"{where}: X | None is evaluated, and fails on Python 3.8")
    return found


def test_the_package_is_python38_and_stdlib_only() -> None:
    assert len(MODULES) >= 10
    problems = [p for path in MODULES for p in _problems(path)]
    assert problems == []


def test_the_checker_catches_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import yaml\nfrom orchestrator.config import host\nfrom . import x\n"
        "import functools\n"
        "def f(s: str) -> None:\n"
        "    s.removeprefix('a')\n    zip([], [], strict=True)\n    y = list[int]\n"
        "    functools.cache\n"
        "from typing import Self\n"
    )
    got = "\n".join(_problems(bad))
    for needle in ("imports yaml", "orchestrator.config", "relative import", "removeprefix",
                   "zip(strict=)", "list[...]", ".cache", "typing.Self"):  # fmt: skip
        assert needle in got, needle
    (tmp_path / "match.py").write_text("match x:\n    case 1:\n        pass\n")
    assert "not Python 3.8 syntax" in "".join(_problems(tmp_path / "match.py"))


def test_runner_pyz_is_deterministic_and_holds_only_the_package() -> None:
    data = runner_archive()
    runner_archive.cache_clear()
    assert runner_archive() == data  # rebuilt from the same sources: the same bytes
    assert RUNNER_PYZ.read_bytes() == data and runner_hash() in str(RUNNER_PYZ)
    with zipfile.ZipFile(RUNNER_PYZ) as archive:
        names = archive.namelist()
        assert names[:2] == ["__main__.py", "orchestrator/__init__.py"]
        assert names[2:] == [
            f"orchestrator/runner/{p.relative_to(PACKAGE).as_posix()}" for p in MODULES
        ]
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def _pythons() -> list[str]:
    """This interpreter, and a real Python 3.8 when the machine has one."""
    old = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    return [sys.executable, *old[:1]]


@pytest.mark.parametrize("python", _pythons())
def test_runner_pyz_runs_on_its_own(tmp_path: Path, python: str) -> None:
    """From a directory where no orchestrator package is importable, with a bare environment."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    probe = subprocess.run(
        [python, str(RUNNER_PYZ), "probe", "--no-pip-freeze", "--no-topo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    snap = json.loads(probe.stdout)
    assert snap["schema_version"] == 1 and snap["hostname"]
    assert snap["probe"]["executable"] == python or Path(snap["probe"]["executable"]).exists()
    origin = subprocess.run(
        [python, str(RUNNER_PYZ), "check-origin", str(tmp_path / "none"), "https://x/y.git"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (origin.returncode, json.loads(origin.stdout)) == (0, {"ok": True, "origin": None})


def test_a_real_cell_runs_from_runner_pyz(home: Path) -> None:
    runner = run_cell(home, make_cell(free_port(), repeats=1))
    assert runner.done["status"] == "passed", runner.done
    assert runner.proc.returncode == 0
    cell = load(cell_dir(home) / "cell.json")
    # run from the folder unpacked beside runner.pyz, it still names the archive and its hash
    assert RUNNER_PYZ.with_name(RUNNER_PYZ.name + ".d") == RUNNER
    assert cell["runner"]["path"] == str(RUNNER_PYZ)
    assert cell["runner"]["version"] == runner_hash()


def test_the_unpacked_runner_is_byte_compiled_and_falls_back_to_the_archive(
    tmp_path: Path,
) -> None:
    assert list((RUNNER / "orchestrator" / "runner" / "__pycache__").glob("cell.*.pyc"))
    blocked = write_runner(tmp_path / "lib")
    squatter = blocked.with_name("runner.pyz.d")
    squatter.write_text("not a folder")  # the folder cannot be made: the archive runs
    assert unpacked_runner(blocked) == blocked
    # no half-unpacked folder left behind
    assert sorted((tmp_path / "lib").iterdir()) == sorted([blocked, squatter])
    squatter.unlink()
    assert unpacked_runner(blocked) == blocked.with_name("runner.pyz.d")
    manifest = blocked.with_name("runner.pyz.d") / MANIFEST_NAME
    made = manifest.stat().st_ctime_ns
    # made once: the next start runs it as it is (not removed and unpacked again, which also
    # pulled the folder from under a runner another run had just started from it)
    assert unpacked_runner(blocked) == blocked.with_name("runner.pyz.d")
    assert manifest.stat().st_ctime_ns == made
