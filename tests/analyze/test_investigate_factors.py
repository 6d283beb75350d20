"""`orch investigate`'s factors: every declared difference, and BAD with one set back to GOOD's.

The cells are the demo playbook's, planned for real (the sglang adapter renders their argv), so
a rebuilt argv is compared with what the adapter itself renders for the other side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.analyze.investigate.factors import (
    INVESTIGATE_AXIS,
    Factor,
    declared_factors,
    relabeled,
    swapped,
)
from orchestrator.app.plan import load_plan
from orchestrator.cell import Cell
from orchestrator.runner.redaction import REDACTED

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo() -> dict[str, dict[str, Any]]:
    """The demo's 8 cells as bundles record them, by `commit-nccl-spec`."""
    plan = load_plan(ROOT / "playbooks" / "demo.yml", [], ["sim_repo=/srv/sim-repo"])
    return {
        "-".join(str(v) for v in c.axes.values()): c.model_dump(mode="json") for c in plan.cells
    }


def test_commit_and_each_env_variable_are_factors(demo: dict[str, dict[str, Any]]) -> None:
    good, bad = demo["good-tuned-eagle3-2"], demo["bad-default-eagle3-2"]
    found = {f.label: f for f in declared_factors(good, bad)}
    assert next(iter(found)) == "commit"  # the commit first
    assert (found["commit"].good, found["commit"].bad) == ("good", "bad")
    assert found["env NCCL_ALGO"].good == "Ring" and found["env NCCL_ALGO"].bad is None
    assert set(found) == {
        "commit",
        "env NCCL_MIN_NCHANNELS",
        "env NCCL_CROSS_NIC",
        "env NCCL_ALGO",
    }
    assert all(f.testable for f in found.values())


def test_server_flags_are_factors_and_argv_is_rebuilt_as_the_adapter_renders_it(
    demo: dict[str, dict[str, Any]],
) -> None:
    good, bad = demo["good-tuned-eagle3-2"], demo["good-tuned-off"]
    found = declared_factors(good, bad)
    assert {f.label for f in found} == {
        "server --speculative-algorithm",
        "server --speculative-draft-model-path",
        "server --speculative-num-steps",
        "server --speculative-eagle-topk",
        "server --speculative-num-draft-tokens",
    }
    # every flag set back at once is GOOD's server, token for token
    back = swapped(bad, found)
    assert back["server"]["argv"] == good["server"]["argv"]
    one = swapped(bad, [f for f in found if f.name == "speculative-num-steps"])
    assert one["server"]["argv"][-2:] == ["--speculative-num-steps", "2"]
    Cell.model_validate(one)  # still a valid cell


def test_an_unset_side_removes_the_variable(demo: dict[str, dict[str, Any]]) -> None:
    good, bad = demo["good-default-eagle3-2"], demo["good-tuned-eagle3-2"]
    algo = [f for f in declared_factors(good, bad) if f.name == "NCCL_ALGO"]
    assert swapped(bad, algo)["env"].get("NCCL_ALGO") is None
    assert swapped(bad, algo)["env"]["NCCL_MIN_NCHANNELS"] == "32"  # the others stay BAD's


def test_swapped_cells_get_their_own_stable_id_and_a_label(
    demo: dict[str, dict[str, Any]],
) -> None:
    good, bad = demo["good-tuned-eagle3-2"], demo["bad-tuned-eagle3-2"]
    (commit,) = declared_factors(good, bad)
    a, b = swapped(bad, [commit]), swapped(bad, [commit])
    assert a["id"] == b["id"] != bad["id"]
    assert a["repo"]["version"] == "good" and a["repo"]["requested"] is None
    assert a["axes"][INVESTIGATE_AXIS] == "commit=good"
    now = relabeled(bad, "bad-now")
    assert now["id"] != bad["id"] and now["id"].startswith("bad-tuned-eagle3-2-bad-now-")
    assert {k: v for k, v in now.items() if k not in ("id", "axes")} == {
        k: v for k, v in bad.items() if k not in ("id", "axes")
    }


def test_what_cannot_be_swapped_says_why(demo: dict[str, dict[str, Any]]) -> None:
    good = demo["good-tuned-eagle3-2"]
    bad = {**demo["bad-tuned-eagle3-2"], "env": {**good["env"], "HF_TOKEN": REDACTED}}
    secret = next(f for f in declared_factors(good, bad) if f.name == "HF_TOKEN")
    assert not secret.testable and secret.why_not == "a secret value"
    other_repo = {**bad, "repo": {**bad["repo"], "url": "/srv/other"}}
    (commit,) = [f for f in declared_factors(good, other_repo) if f.kind == "commit"]
    assert not commit.testable and "different repositories" in str(commit.why_not)
    with pytest.raises(ValueError, match="cannot be swapped"):
        swapped(other_repo, [commit])
    # a generic command is never edited by guess
    generic = {**good, "server": {**good["server"], "adapter": "generic", "argv": ["serve"]}}
    changed = {**generic, "server": {**generic["server"], "args": {"x": 1}}}
    flags = declared_factors(generic, changed)
    assert flags and not any(f.testable for f in flags)


def test_how_long_to_measure_is_not_a_factor(demo: dict[str, dict[str, Any]]) -> None:
    good = demo["good-tuned-eagle3-2"]
    more = Factor("bench_setting", "num-prompts", good=8, bad=4)
    longer = swapped(good, [more])  # the adapter's rendering, with 8 prompts
    longer["bench"] = {**longer["bench"], "repeats": 20, "warmup": 3}
    found = declared_factors(good, longer)
    assert [f.label for f in found] == ["bench --num-prompts"] and found[0].testable
    assert swapped(longer, found)["bench"]["argv"] == good["bench"]["argv"]
    # an argv edited by hand (not its args' rendering) is not rebuilt
    edited = {**longer, "bench": {**longer["bench"], "argv": ["client", "--num-prompts", "8"]}}
    assert not declared_factors(good, edited)[0].testable


def test_the_setup_command_is_a_factor(demo: dict[str, dict[str, Any]]) -> None:
    """A package bump the playbook makes (its repo setup) is swapped like any declared value."""
    good = demo["good-tuned-eagle3-2"]
    bumped = {
        **good,
        "repo": {**good["repo"], "setup": "pip install 'kernels==2.1' && sh setup.sh"},
    }
    (setup,) = declared_factors(good, bumped)
    assert setup.label == "repo setup" and setup.testable
    back = swapped(bumped, [setup])
    assert back["repo"]["setup"] == good["repo"]["setup"] == "sh setup.sh"
    assert back["axes"][INVESTIGATE_AXIS] == "repo setup=sh setup.sh"
