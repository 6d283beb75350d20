"""Repeats measure what they claim on the real engine (issue 36): vLLM's prefix caching is on
by default, and a measured repeat that sent the warm-up's prompts again was served from the
cache the warm-up filled (before the fix: hit rate 0 % through the warm-up, then 35-53 %).

The cell of playbooks/vllm_cpu.yml with a warm-up, as orch runs it now: each run sends random
prompts of its own (`vllm bench serve --seed`, derived per run and recorded). The engine's own
stats line (`Prefix cache hit rate`, over its most recent 1000 requests) then shows no more
hits than the prompts explain by chance: the tiny model has 1024 tokens and vLLM's random
prompts start at a random one, so two prompts of any seeds coincide about once in 1024
(prompt_collisions.py counts those hits with vLLM's own dataset code and the recorded seeds;
with a real model's 32k-150k vocabulary they are 30-150 times rarer). With `bench.cache: warm`
(the same prompts every run, the old behaviour) the repeats are served from the cache.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import Engine
from .engine_helpers import PLAYBOOK, apply_argv, load, only_run, orch_env

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(900)]

COLLISIONS = Path(__file__).with_name("prompt_collisions.py")
HIT_RATE = re.compile(r"Prefix cache hit rate: ([0-9.]+)%")
# The cell: random dataset, input 256, output 16, 24 prompts, concurrency 4, 3 repeats
WORKLOAD = ["-e", "num_prompts=24", "-e", "input_len=256", "-e", "output_len=16"]
CELL = ["--cells", "max_seqs=4,concurrency=4", "-e", "repeats=3"]


def _playbook(tmp_path: Path) -> Path:
    """playbooks/vllm_cpu.yml with one warm-up run and `bench.cache` from -e cache=..."""
    data = yaml.safe_load(PLAYBOOK.read_text())
    data["vars"]["cache"] = "fresh"
    data["bench"]["warmup"] = 1
    data["bench"]["cache"] = "{{ cache }}"
    path = tmp_path / "vllm_cpu_warmup.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run(engine: Engine, tmp_path: Path, *extra: str) -> Path:
    """The one cell's folder after `orch apply`."""
    home, results = tmp_path / "home", tmp_path / "results"
    argv = apply_argv(engine.python, engine.model, results, *WORKLOAD, *CELL, *extra)
    argv[argv.index(str(PLAYBOOK))] = str(_playbook(tmp_path))
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=orch_env(home), timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (cell,) = (only_run(results) / "cells").iterdir()
    return cell


def _hit_rates(cell: Path) -> list[float]:
    return [float(m) for m in HIT_RATE.findall((cell / "server.log").read_text())]


def _chance_hits(engine: Engine, seeds: list[int]) -> dict[str, Any]:
    """What vLLM's random prompts of these seeds explain by chance (prompt_collisions.py)."""
    proc = subprocess.run(
        [engine.python, str(COLLISIONS), engine.model, "24", "256", "16", *map(str, seeds)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_no_repeat_is_served_from_what_earlier_runs_left(engine: Engine, tmp_path: Path) -> None:
    cell = _run(engine, tmp_path)
    runs = ["warmup-1", "1", "2", "3"]
    exits = [load(cell / "bench" / n / "exit.json") for n in runs]
    seeds = [int(e["seed"]) for e in exits]
    assert len(set(seeds)) == len(runs), seeds  # one per run, recorded
    for e in exits:
        assert e["argv"][-2:] == ["--seed", str(e["seed"])]
    rates = _hit_rates(cell)
    assert len(rates) >= 3, "no vLLM stats lines in server.log"
    chance = _chance_hits(engine, seeds)
    # each stats line's rate covers every request so far; 0.05: the line's one decimal
    assert max(rates) <= chance["max_rate"] + 0.05, (rates, chance)


def test_a_warm_cache_serves_the_repeats_from_the_warm_up(engine: Engine, tmp_path: Path) -> None:
    cell = _run(engine, tmp_path, "-e", "cache=warm")
    rates = _hit_rates(cell)
    assert max(rates) >= 25.0, rates  # the issue measured 35-53 % in the repeats
