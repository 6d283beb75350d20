"""`bench.starts: N`: the cell's repeats spread over N server starts; in the cell (and its id)
only where it is more than one, refused where it is written when it cannot be done."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.cell import Cell
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.errors import InputError
from orchestrator.plan.build import build_cells

SERVER = "name: p\nserver: {command: [s, --port, '1']}\n"


def plan(tmp_path: Path, text: str) -> list[Cell]:
    path = tmp_path / "playbook.yml"
    path.write_text(textwrap.dedent(text))
    return build_cells(load_playbook(path, {}), load_inventory(None))


def refused(tmp_path: Path, text: str) -> InputError:
    with pytest.raises(InputError) as err:
        plan(tmp_path, text)
    return err.value


def test_starts_reach_the_cell_and_one_start_keeps_the_id(tmp_path: Path) -> None:
    (plain,) = plan(tmp_path, SERVER + "bench: {command: [b], repeats: 6}\n")
    (one,) = plan(tmp_path, SERVER + "bench: {command: [b], repeats: 6, starts: 1}\n")
    (three,) = plan(tmp_path, SERVER + "bench: {command: [b], repeats: 6, starts: 3}\n")
    assert plain.id == one.id and "starts" not in plain.model_dump(mode="json")["bench"]
    assert three.bench.starts == 3 and three.id != plain.id


def test_starts_that_cannot_be_done_are_refused_where_written(tmp_path: Path) -> None:
    err = refused(tmp_path, SERVER + "bench:\n  command: [b]\n  repeats: 2\n  starts: 3\n")
    assert err.key_path == "bench.starts" and "more than repeats 2" in err.message
    assert err.location is not None and err.location.line == 6
    err = refused(tmp_path, "name: p\nbench: {command: [b], repeats: 4, starts: 2}\n")
    assert "needs a server" in err.message and err.key_path == "bench.starts"
    sequential = "repeats: {min: 2, max: 8, until: 1%, metric: tps}, metrics: {tps: 'x (\\\\d+)'}"
    err = refused(tmp_path, SERVER + "bench: {command: [b], starts: 2, " + sequential + "}\n")
    assert "fixed repeats count" in err.message
    err = refused(tmp_path, SERVER + "bench: {command: [b], repeats: 4, starts: 0}\n")
    assert err.key_path == "bench.starts" and "integer >= 1" in err.message


def test_runs_spread_over_starts_each_with_its_warmup() -> None:
    from orchestrator.runner.starts import runs_over_starts

    runs = runs_over_starts(1, 7, 3)
    assert [r for r in runs if r[0] == "measure"] == [
        ("measure", 1, 1),
        ("measure", 2, 1),
        ("measure", 3, 1),
        ("measure", 4, 2),
        ("measure", 5, 2),
        ("measure", 6, 3),
        ("measure", 7, 3),
    ]
    assert [r for r in runs if r[0] == "warmup"] == [("warmup", n, n) for n in (1, 2, 3)]
    assert runs_over_starts(2, 3, 1) == [
        ("warmup", 1, 1),
        ("warmup", 2, 1),
        ("measure", 1, 1),
        ("measure", 2, 1),
        ("measure", 3, 1),
    ]


def test_plan_says_the_extra_starts(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "playbook.yml"
    path.write_text(SERVER + "bench: {command: [b], repeats: 6, starts: 3}\n")
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "plan", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "2 more server start(s) for bench.starts" in out
