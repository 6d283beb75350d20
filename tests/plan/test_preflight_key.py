"""`preflight: {gpus_busy: warn}` reaches the cell without changing its id; a bad value is refused
where it is written."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.cell import Cell
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.errors import InputError
from orchestrator.plan.build import build_cells

BASE = "name: p\nserver: {command: [s, --port, '1']}\nbench: {command: [b]}\n"


def plan(tmp_path: Path, text: str) -> list[Cell]:
    path = tmp_path / "playbook.yml"
    path.write_text(textwrap.dedent(text))
    return build_cells(load_playbook(path, {}), load_inventory(None))


def test_the_policy_is_in_the_cell_but_not_in_its_id(tmp_path: Path) -> None:
    (plain,) = plan(tmp_path, BASE)
    (warned,) = plan(tmp_path, BASE + "preflight: {gpus_busy: warn}\n")
    assert plain.preflight.gpus_busy == "refuse"
    assert warned.preflight.gpus_busy == "warn"
    assert warned.id == plain.id
    assert warned.model_dump(mode="json")["preflight"] == {"gpus_busy": "warn"}


def test_a_bad_policy_is_refused_where_it_is_written(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        plan(tmp_path, BASE + "preflight: {gpus_busy: ignore}\n")
    assert err.value.key_path == "preflight.gpus_busy"
    assert err.value.location is not None and err.value.location.line == 4
    with pytest.raises(InputError) as err:
        plan(tmp_path, BASE + "preflight: {gpu_busy: warn}\n")
    assert "gpus_busy" in (err.value.hint or "")
