"""`bench.cache` and the inputs each run adds (issue 36, "Repeats must measure what they claim"):
with `cache: fresh` (the default) every run of a seeded client gets a seed of its own, which is
not a part of the cell id; `cache: warm` is another workload (another id); a bad value is
refused where it is written; a pinned seed is honoured and `orch plan` warns."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.cell import Cell
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.errors import InputError
from orchestrator.plan.build import build_cells
from orchestrator.plan.lint import plan_warnings
from orchestrator.runner.bench import derive_seed, run_flags, seed_key

VLLM = """\
name: p
server: {adapter: vllm, args: {model: /m, port: 30001}}
bench: {adapter: vllm.bench_serve, args: {dataset-name: random, num-prompts: 24}, warmup: 1, repeats: 3}
"""  # noqa: E501
OLD_ID = "cell-dde9ba45"  # the id orch gave this playbook before run inputs existed


def plan(tmp_path: Path, text: str) -> list[Cell]:
    path = tmp_path / "playbook.yml"
    path.write_text(textwrap.dedent(text))
    return build_cells(load_playbook(path, {}), load_inventory(None))


def test_a_fresh_cache_is_the_default_and_keeps_the_cell_id(tmp_path: Path) -> None:
    (cell,) = plan(tmp_path, VLLM)
    assert cell.id == OLD_ID
    assert cell.bench.cache == "fresh" and "cache" not in cell.bench.model_dump(mode="json")
    assert cell.run_inputs is not None and cell.run_inputs.seed_flag == "--seed"
    (explicit,) = plan(tmp_path, VLLM.replace("repeats: 3}", "repeats: 3, cache: fresh}"))
    assert explicit.id == OLD_ID


def test_a_warm_cache_is_another_workload_with_no_seed(tmp_path: Path) -> None:
    (warm,) = plan(tmp_path, VLLM.replace("repeats: 3}", "repeats: 3, cache: warm}"))
    assert warm.id != OLD_ID and warm.run_inputs is None


def test_a_bad_cache_value_is_refused_where_it_is_written(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        plan(tmp_path, VLLM.replace("repeats: 3}", "repeats: 3, cache: cold}"))
    assert err.value.key_path == "bench.cache"
    assert err.value.location is not None and err.value.location.line == 3
    assert "fresh, warm" in err.value.message


def test_the_seed_follows_the_workload_not_the_port(tmp_path: Path) -> None:
    (a,) = plan(tmp_path, VLLM)
    (b,) = plan(tmp_path, VLLM.replace("30001", "30002"))
    (c,) = plan(tmp_path, VLLM.replace("num-prompts: 24", "num-prompts: 25"))
    assert a.id != b.id  # where the server listens is in the id...
    assert a.run_inputs is not None and b.run_inputs is not None and c.run_inputs is not None
    assert a.run_inputs.seed_key == b.run_inputs.seed_key  # ...not in what the client sends
    assert a.run_inputs.seed_key != c.run_inputs.seed_key
    argv = list(a.bench.argv)
    key = seed_key(a.run_inputs.model_dump(), argv)
    runs = [("warmup", 1), ("measure", 1), ("measure", 2), ("measure", 3), ("profile", 1)]
    seeds = [derive_seed(key, kind, n) for kind, n in runs]
    assert len(set(seeds)) == len(runs) and all(0 <= s < 2**31 for s in seeds)
    assert seeds == [derive_seed(key, kind, n) for kind, n in runs]  # the same in every run
    assert run_flags(a.run_inputs.model_dump(), seeds[1]) == ["--seed", str(seeds[1])]


def test_sglang_flushes_after_the_clients_warm_up_even_with_a_pinned_seed(tmp_path: Path) -> None:
    text = """\
    name: p
    server: {adapter: sglang, args: {model-path: /m, port: 30001}}
    bench: {adapter: sglang.bench_serving, args: {dataset-name: random, seed: 7}}
    """
    (pinned,) = plan(tmp_path, text)
    assert pinned.run_inputs is not None
    assert pinned.run_inputs.seed_flag is None and pinned.run_inputs.flags == ("--flush-cache",)
    (own,) = plan(tmp_path, text.replace("seed: 7", "flush-cache: true"))
    assert own.run_inputs is not None and own.run_inputs.flags == ()  # the user's own flag
    assert own.run_inputs.seed_flag == "--seed"


def test_a_pinned_seed_is_honoured_and_warned_about(tmp_path: Path) -> None:
    text = VLLM.replace("num-prompts: 24}", "num-prompts: 24, seed: 3}")
    (cell,) = plan(tmp_path, text)
    assert cell.run_inputs is None and cell.bench.argv[-2:] != ("--seed", "3")
    assert "--seed" in cell.bench.argv
    playbook = load_playbook(tmp_path / "playbook.yml", {})
    (warning,) = [w for w in plan_warnings(playbook, [cell]) if "seed" in w]
    assert "playbook.yml:3" in warning and "bench.cache: warm" in warning
    warm = text.replace("repeats: 3}", "repeats: 3, cache: warm}")
    (cell,) = plan(tmp_path, warm)
    playbook = load_playbook(tmp_path / "playbook.yml", {})
    assert not [w for w in plan_warnings(playbook, [cell]) if "seed" in w]
    generic = "name: p\nbench: {command: [b, --seed, '1']}\n"
    (cell,) = plan(tmp_path, generic)
    assert cell.run_inputs is None  # orch cannot tell what a generic client sends
