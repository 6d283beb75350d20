"""`profile:` reaches the cell (the adapter's profiler URLs) without changing its id; where the
server cannot be profiled it is refused where it is written, before anything runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.cell import Cell
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.errors import InputError
from orchestrator.plan.build import build_cells

SGLANG = """\
name: p
server: {adapter: sglang, args: {model-path: /m, port: 30001}}
bench: {command: [b]}
"""
GENERIC = "name: p\nserver: {command: [s, --port, '1']}\nbench: {command: [b]}\n"


def plan(tmp_path: Path, text: str) -> list[Cell]:
    path = tmp_path / "playbook.yml"
    path.write_text(textwrap.dedent(text))
    return build_cells(load_playbook(path, {}), load_inventory(None))


def test_profile_is_in_the_cell_but_not_in_its_id(tmp_path: Path) -> None:
    (plain,) = plan(tmp_path, SGLANG)
    (profiled,) = plan(tmp_path, SGLANG + "profile: {num_steps: 5}\n")
    (on,) = plan(tmp_path, SGLANG + "profile: true\n")
    (off,) = plan(tmp_path, SGLANG + "profile: false\n")
    assert plain.profile is None and off.profile is None
    assert "profile" not in plain.model_dump(mode="json")  # older cells' JSON is unchanged
    assert profiled.id == plain.id == on.id
    assert profiled.profile is not None and profiled.profile.num_steps == 5
    assert profiled.profile.start_url == "http://127.0.0.1:30001/start_profile"
    assert profiled.profile.stop_url == "http://127.0.0.1:30001/stop_profile"
    assert on.profile is not None and on.profile.num_steps == 20


def test_a_server_without_profiler_endpoints_is_refused_where_profile_is(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        plan(tmp_path, GENERIC + "profile: {num_steps: 5}\n")
    assert err.value.key_path == "profile"
    assert err.value.location is not None and err.value.location.line == 4
    assert "generic adapter has no profiler endpoints" in err.value.message
    with pytest.raises(InputError) as err:
        plan(tmp_path, SGLANG + "profile: {num_step: 5}\n")  # a typo
    assert err.value.key_path == "profile.num_step"
