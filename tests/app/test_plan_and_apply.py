"""The application layer from Python, without the CLI: a Plan (secrets found once, from every
source) and `prepare_apply` running it into a bundle on the local host."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.app.apply import ApplyRequest, prepare_apply
from orchestrator.app.plan import load_plan
from orchestrator.errors import InputError
from orchestrator.execute.apply.progress import Progress

BENCH = "import os; print('x', len(os.environ.get('API_TOKEN', '')))"


def _playbook(tmp: Path, **extra: object) -> Path:
    playbook = {
        "name": "app",
        "vars": {"api_token": "tok-from-the-playbook"},
        "matrix": {"a": [1, 2]},
        "env": {"API_TOKEN": "{{ api_token }}"},
        "bench": {"command": [sys.executable, "-c", BENCH], "metrics": {"x": r"x ([0-9]+)"}},
        "snapshot": {"pip_freeze": False, "topo": False},
        **extra,
    }
    path = tmp / "pb.yml"
    path.write_text(yaml.safe_dump(playbook))
    return path


def test_a_plan_finds_every_secret_once_an_overridden_extra_var_included(tmp_path: Path) -> None:
    plan = load_plan(_playbook(tmp_path), extra_vars=["api_token=first-typed", "api_token=wins-1"])
    assert len(plan.cells) == 2
    assert {c.env["API_TOKEN"] for c in plan.cells} == {"wins-1"}
    # the value the file holds, the one -e overrode and the one in use: all hidden
    assert {"tok-from-the-playbook", "first-typed", "wins-1"} <= set(plan.secrets)


def test_selecting_cells_narrows_the_plan_and_keeps_it_frozen(tmp_path: Path) -> None:
    plan = load_plan(_playbook(tmp_path))
    one = plan.select("a=2")
    assert [c.axes["a"] for c in one.cells] == [2] and len(plan.cells) == 2
    with pytest.raises(AttributeError):
        one.cells = ()  # type: ignore[misc]
    with pytest.raises(InputError):
        plan.select("a=9")


def test_bad_input_is_an_input_error_before_anything_runs(tmp_path: Path) -> None:
    path = _playbook(tmp_path, bench={"command": ["true"], "nonsense": 1})
    with pytest.raises(InputError) as caught:
        load_plan(path)
    assert caught.value.exit_code == 2 and "nonsense" in caught.value.render()


def test_prepare_apply_runs_a_plan_into_a_bundle_without_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the local host's workdir lives there
    plan = load_plan(_playbook(tmp_path))
    request = ApplyRequest(results_dir=tmp_path / "results", argv=["python-caller"])
    run, resolutions = prepare_apply(
        plan, request, Progress({"localhost": 2}, stream=io.StringIO())
    )
    assert resolutions == [] and run.secrets == list(plan.secrets)
    outcome = run.execute()
    assert outcome.ok, {c: o.reason for c, o in outcome.cells.items()}
    record = json.loads((outcome.path / "run.json").read_text())
    assert record["argv"] == ["python-caller"]
    assert "tok-from-the-playbook" not in (outcome.path / "run.json").read_text()


def test_retry_failed_without_resume_is_refused(tmp_path: Path) -> None:
    plan = load_plan(_playbook(tmp_path))
    with pytest.raises(InputError, match="--retry-failed needs --resume"):
        prepare_apply(plan, ApplyRequest(results_dir=tmp_path / "r", retry_failed=True))
