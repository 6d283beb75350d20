"""Rendered sections are checked by the playbook model that checked the file, in rendered mode."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.adapters import BENCH_ADAPTERS, SERVER_ADAPTERS
from orchestrator.cell import Cell
from orchestrator.config.fields import FieldProblem, parse_tolerance
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.model import PlaybookModel, TimeoutsSection
from orchestrator.config.playbook import load_playbook
from orchestrator.config.values import BENCH_ADAPTER_NAMES, SERVER_ADAPTER_NAMES
from orchestrator.errors import InputError
from orchestrator.plan.build import build_cells


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "playbook.yml"
    path.write_text(textwrap.dedent(text))
    return path


def plan(tmp_path: Path, text: str) -> list[Cell]:
    return build_cells(load_playbook(write(tmp_path, text), {}), load_inventory(None))


def plan_error(tmp_path: Path, text: str) -> InputError:
    with pytest.raises(InputError) as err:
        plan(tmp_path, text)
    return err.value


def load_error(tmp_path: Path, text: str) -> InputError:
    with pytest.raises(InputError) as err:
        load_playbook(write(tmp_path, text), {})
    return err.value


def test_the_loaded_playbook_keeps_its_validated_model(tmp_path: Path) -> None:
    loaded = load_playbook(
        write(tmp_path, "name: m\ntimeouts: {cell: 60}\nbench: {command: [b]}\n"), {}
    )
    assert isinstance(loaded.model, PlaybookModel)
    assert isinstance(loaded.model.timeouts, TimeoutsSection)
    assert loaded.model.timeouts.cell == 60
    assert loaded.model.strategy == "each" and loaded.model.hosts == "all"  # the model's defaults
    assert "strategy" not in loaded.data  # the data stays as written


def test_a_bad_value_is_the_same_error_written_or_rendered(tmp_path: Path) -> None:
    written = load_error(tmp_path, "name: t\ntimeouts: {cell: -5}\nbench: {command: [b]}\n")
    rendered = plan_error(
        tmp_path,
        """
        name: t
        vars: {limit: -5}
        timeouts: {cell: "{{ limit }}"}
        bench: {command: [b]}
        """,
    )
    assert written.message == rendered.message == "expected a positive number, got -5"
    assert written.key_path == rendered.key_path == "timeouts.cell"
    assert rendered.location is not None and rendered.location.line == 4  # the key rendered


def test_rendered_numbers_may_be_text_and_must_be_finite(tmp_path: Path) -> None:
    play = """
    name: n
    vars: {t: "{{ value }}"}
    timeouts: {cell: "{{ t }}"}
    bench: {command: [b]}
    """
    (cell,) = plan(tmp_path, play.replace("{{ value }}", "90"))
    assert cell.cell_timeout == 90.0
    error = plan_error(tmp_path, play.replace("{{ value }}", "inf"))
    assert error.message == "expected a positive number, got 'inf'"
    assert error.key_path == "timeouts.cell"
    error = plan_error(tmp_path, play.replace("{{ value }}", "soon"))
    assert error.message == "expected a positive number, got 'soon'"


def test_a_rendered_env_takes_booleans_but_not_bad_names(tmp_path: Path) -> None:
    (cell,) = plan(
        tmp_path,
        """
        name: e
        vars: {enabled: true, extra: {NCCL_P2P: 0}}
        env: ["{{ extra }}", {FLAG: "{{ enabled }}"}, "{{ None }}"]
        bench: {command: [b]}
        """,
    )
    assert cell.env == {"NCCL_P2P": "0", "FLAG": "true"}  # the null item added nothing
    error = plan_error(
        tmp_path,
        """
        name: e
        vars: {extra: {NCCL-ALGO: Ring}}
        env: "{{ extra }}"
        bench: {command: [b]}
        """,
    )
    assert error.message == "'NCCL-ALGO' is not a valid environment variable name"
    assert error.key_path == "env.NCCL-ALGO"


def test_rendered_expectations_follow_the_model(tmp_path: Path) -> None:
    play = """
    name: x
    vars: {tol: "TOL"}
    expect: {tput: {ref: 90, tolerance: "{{ tol }}"}}
    bench: {command: [b]}
    """
    (cell,) = plan(tmp_path, play.replace("TOL", "5%"))
    assert cell.expect["tput"].tolerance == pytest.approx(0.05)
    (cell,) = plan(tmp_path, play.replace("TOL", "0.1"))  # numeric text, as a template gives it
    assert cell.expect["tput"].tolerance == pytest.approx(0.1)
    error = plan_error(
        tmp_path,
        """
        name: x
        vars: {low: 10, high: 5}
        expect: {tput: {min: "{{ low }}", max: "{{ high }}"}}
        bench: {command: [b]}
        """,
    )
    assert error.message == "min 10.0 is above max 5.0"
    assert error.key_path == "expect.tput.min"


@pytest.mark.parametrize(
    ("value", "numeric_text", "fraction"),
    [("5%", False, 0.05), (" 12.5 % ", False, 0.125), (0.05, False, 0.05), (0, False, 0.0)],
)
def test_parse_tolerance_gives_a_fraction(
    value: object, numeric_text: bool, fraction: float
) -> None:
    assert parse_tolerance(value, numeric_text=numeric_text) == pytest.approx(fraction)


@pytest.mark.parametrize("value", ["five percent", "0.05", -1, "-5%", True, None, float("nan")])
def test_parse_tolerance_refuses_the_rest(value: object) -> None:
    with pytest.raises(FieldProblem, match="bad tolerance"):
        parse_tolerance(value)
    assert parse_tolerance("0.05", numeric_text=True) == pytest.approx(0.05)


def test_the_model_names_the_adapters_the_planner_has() -> None:
    """config sits below adapters, so the model lists their names; they must stay the same."""
    assert set(SERVER_ADAPTER_NAMES) == set(SERVER_ADAPTERS)
    assert set(BENCH_ADAPTER_NAMES) == set(BENCH_ADAPTERS)
