"""Bundles from elsewhere through the real CLI: terminal escapes never reach the screen, and a
wrong-typed document is one clear error (or one skipped run), never an internal error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_reader import CELL, orch, write_run

ESC = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
OSC = "\x1b]0;owned\x07"
CSI = "\x1b[2J\x1b[31m"


def edit(path: Path, **changes: object) -> None:
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def hostile_run(results: Path, tmp_path: Path) -> Path:
    run = write_run(results, "r1", tmp_path)
    edit(run / "run.json", playbook=f"demo{OSC}", status=f"passed{CSI}", argv=["orch", CSI])
    cell_json = run / "cells" / CELL / "cell.json"
    doc = json.loads(cell_json.read_text())
    doc["reason"] = f"boom {OSC}\x9b6n\rfake line"
    doc["cell"]["axes"] = {"spec": f"x{CSI}y"}
    cell_json.write_text(json.dumps(doc))
    return run


@pytest.mark.parametrize(
    "command",
    [["show", "{run}"], ["show", "{run}/{cell}"], ["runs", "{results}"], ["report", "{run}"]],
)
def test_escapes_from_a_bundle_never_reach_the_terminal(tmp_path: Path, command: list[str]) -> None:
    results = tmp_path / "results"
    run = hostile_run(results, tmp_path)
    args = [a.format(run=run, cell=CELL, results=results) for a in command]
    res = orch(tmp_path, *args)
    assert res.returncode == 0, res.stderr
    assert not ESC.search(res.stdout), repr(res.stdout)
    assert not ESC.search(res.stderr), repr(res.stderr)
    shown = {"show": "demo", "runs": "demo", "report": "xy"}[command[0]]
    if command == ["show", "{run}/{cell}"]:
        shown = "boom fake line"
    assert shown in res.stdout


def test_an_escape_in_a_cell_name_is_stripped_from_errors_too(tmp_path: Path) -> None:
    run = write_run(tmp_path / "results", "r1", tmp_path)
    res = orch(tmp_path, "show", f"{run}/nope{OSC}")
    assert res.returncode == 2
    assert "error:" in res.stderr and not ESC.search(res.stderr), repr(res.stderr)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("started", [1], "'started' is not a string"),
        ("cells", ["a"], "'cells' is not a mapping of cell id to its record"),
        ("cells", {CELL: 3}, "'cells' is not a mapping of cell id to its record"),
        ("argv", "orch apply", "'argv' is not a list of strings"),
        ("hosts", [1, 2], "'hosts' is not a list of host names"),
    ],
)
def test_a_wrong_typed_run_json_is_skipped_by_runs_and_refused_by_show(
    tmp_path: Path, field: str, value: object, problem: str
) -> None:
    results = tmp_path / "results"
    write_run(results, "good", tmp_path)
    bad = write_run(results, "bad", tmp_path)
    edit(bad / "run.json", **{field: value})

    listed = orch(tmp_path, "runs", str(results))
    assert listed.returncode == 0, listed.stderr
    assert "good" in listed.stdout and "bad" not in listed.stdout
    assert listed.stderr.strip() == f"skipped {bad}: run.json: {problem}"

    shown = orch(tmp_path, "show", str(bad))
    assert shown.returncode == 2, shown.stderr
    assert shown.stderr.strip() == (
        f"error: {bad}: run.json: {problem} (the bundle is damaged or was not written by orch)"
    )


@pytest.mark.parametrize(
    ("name", "content", "refs"),
    [
        ("metrics.json", [1, 2], ["{run}", "{run}/{cell}"]),
        ("metrics.json", "x", ["{run}", "{run}/{cell}"]),
        ("repo.json", [], ["{run}/{cell}"]),  # a run's listing does not read repo.json
        ("env_check.json", 3, ["{run}/{cell}"]),
    ],
)
def test_a_wrong_typed_cell_file_is_one_clear_error(
    tmp_path: Path, name: str, content: object, refs: list[str]
) -> None:
    run = write_run(tmp_path / "results", "r1", tmp_path)
    (run / "cells" / CELL / name).write_text(json.dumps(content))
    for args in (["show", ref.format(run=run, cell=CELL)] for ref in refs):
        res = orch(tmp_path, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert res.stderr.strip() == (
            f"error: {run / 'cells' / CELL / name}: not a JSON object "
            "(the bundle is damaged or was not written by orch)"
        )


@pytest.mark.parametrize(
    "change",
    [
        {"status": ["passed"]},
        {"cell": "x"},
        {"steps": [1]},
    ],
)
def test_a_wrong_typed_cell_json_is_one_clear_error(
    tmp_path: Path, change: dict[str, object]
) -> None:
    run = write_run(tmp_path / "results", "r1", tmp_path)
    edit(run / "cells" / CELL / "cell.json", **change)
    res = orch(tmp_path, "show", f"{run}/{CELL}")
    assert res.returncode == 2, res.stderr
    (key,) = change
    assert f"cell.json: {key!r} is not" in res.stderr and "internal error" not in res.stderr


@pytest.mark.parametrize(
    ("spec", "metrics"),
    [
        ({"server": [1], "bench": {"argv": [1, "x"]}}, {"summary": [1], "expectations": {}}),
        ({"server": {"argv": "a b"}}, {"summary": {"t": 1}, "checks": [1, {"ok": False}]}),
    ],
)
def test_odd_values_inside_well_formed_files_still_show(
    tmp_path: Path, spec: dict[str, object], metrics: dict[str, object]
) -> None:
    run = write_run(tmp_path / "results", "r1", tmp_path)
    cell_json = run / "cells" / CELL / "cell.json"
    doc = json.loads(cell_json.read_text())
    doc["cell"].update(spec)
    cell_json.write_text(json.dumps(doc))
    (run / "cells" / CELL / "server.json").write_text(json.dumps({"argv": 5}))
    (run / "cells" / CELL / "metrics.json").write_text(json.dumps(metrics))
    for args in (["show", str(run)], ["show", f"{run}/{CELL}"]):
        res = orch(tmp_path, *args)
        assert res.returncode == 0, (args, res.stderr)
        assert CELL in res.stdout
