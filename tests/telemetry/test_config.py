"""`telemetry:` in the playbook: on by default at 1 s, `false` turns it off, options are carried in
the Cell and never change a cell id; unknown keys are located errors (exit 2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.cell import Cell, TelemetrySpec, cell_id
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.errors import InputError, SourceLocation
from orchestrator.plan.build import build_cells, cell_spec

BASE = """
name: demo
matrix:
  n: [1, 2]
server:
  command: "python -m srv --port 30000"
  port: 30000
bench:
  command: [python, -m, bench, "{{ matrix.n }}"]
  repeats: 2
"""


def plan(tmp_path: Path, extra: str = "") -> list[Cell]:
    pb = tmp_path / "pb.yml"
    pb.write_text(textwrap.dedent(BASE) + textwrap.dedent(extra))
    return build_cells(load_playbook(pb), load_inventory(None), limit=None)


def test_telemetry_is_on_at_one_second_by_default(tmp_path: Path) -> None:
    cells = plan(tmp_path)
    assert cells and all(c.telemetry == TelemetrySpec() for c in cells)
    assert cells[0].telemetry.enabled and cells[0].telemetry.interval == 1.0
    assert cells[0].model_dump(mode="json")["telemetry"] == {
        "enabled": True,
        "interval": 1.0,
        "fields": None,
    }


@pytest.mark.parametrize(
    ("section", "want"),
    [
        ("telemetry: false\n", TelemetrySpec(enabled=False)),
        ("telemetry: {interval: 0.5}\n", TelemetrySpec(interval=0.5)),
        (
            "telemetry: {interval: 2, fields: [clocks.sm, power.draw]}\n",
            TelemetrySpec(interval=2.0, fields=("clocks.sm", "power.draw")),
        ),
        ("telemetry: {enabled: false}\n", TelemetrySpec(enabled=False)),
        ("telemetry: true\n", TelemetrySpec()),
    ],
)
def test_telemetry_options_reach_the_cell_and_keep_its_id(
    tmp_path: Path, section: str, want: TelemetrySpec
) -> None:
    plain = plan(tmp_path)
    changed = plan(tmp_path, section)
    assert [c.telemetry for c in changed] == [want] * len(changed)
    # Observation only, as `snapshot:`: the ids are those of the playbook without it.
    assert [c.id for c in changed] == [c.id for c in plain]
    for c in changed:
        assert c.id == cell_id(c.axes, c.host, cell_spec(c))
        assert "telemetry" not in cell_spec(c)
        assert Cell.model_validate(c.model_dump(mode="json")) == c


@pytest.mark.parametrize(
    ("snippet", "needle", "col"),
    [
        ("telemetry: {intervall: 1}", "unknown key 'intervall'", 13),
        ("telemetry: {interval: 0}", "expected a positive number", 23),
        ("telemetry: {fields: clocks.sm}", "expected a list of strings", 21),
        ("telemetry: 3", "expected a mapping", 12),
    ],
)
def test_bad_telemetry_is_a_located_error(
    tmp_path: Path, snippet: str, needle: str, col: int
) -> None:
    pb = tmp_path / "pb.yml"
    pb.write_text(f"name: x\nbench: {{command: [a]}}\n{snippet}\n")
    with pytest.raises(InputError) as info:
        load_playbook(pb)
    assert needle in info.value.render()
    assert info.value.location == SourceLocation(str(pb), 3, col)
    assert info.value.exit_code == 2


def test_validate_exits_2_on_an_unknown_telemetry_key(tmp_path: Path) -> None:
    pb = tmp_path / "pb.yml"
    pb.write_text("name: x\nbench: {command: [a]}\ntelemetry: {interval: 1, feilds: [a]}\n")
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", str(pb)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done
    assert "feilds" in done.stderr and "fields" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_json_schema_accepts_false_and_the_mapping() -> None:
    from orchestrator.config.model import playbook_json_schema

    section = playbook_json_schema()["$defs"]["TelemetrySection"]
    kinds = [s.get("type") for s in section["anyOf"]]
    assert kinds == ["object", "boolean"]
    assert set(section["anyOf"][0]["properties"]) == {"enabled", "interval", "fields"}
