"""Repeats measure what they claim (issue 36): no measured repeat is served from the prefix
cache its warm-up (or an earlier repeat) filled.

The simulator's server keeps a prefix cache as SGLang's radix cache does (sim/prefix_cache.py)
and counts the prompt tokens it found cached; the sglang adapter captures /server_info after
every run, so each run's hits are the counter's difference across it. With `cache: warm` every
run sends the same prompts (what orch did for every cell before): each measured repeat finds
nearly all of them cached. By default each run sends prompts of its own (a seed derived per
run) and SGLang's cache is flushed after the client's warm-up request: no hits at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim_helpers import BENCH, SERVE, free_port, load, only_run, orch

PLAYBOOK = """\
name: prefix
vars:
  cache: fresh
env: {{ORCH_SIM_TIME_SCALE: "0.01"}}
server:
  adapter: sglang
  launcher: {serve}
  args: {{model-path: m, host: 127.0.0.1, port: {port}, startup-time: 0}}
  ready: {{timeout: 60}}
bench:
  adapter: sglang.bench_serving
  launcher: {bench}
  args:
    dataset-name: random
    num-prompts: 8
    random-input-len: 64
    random-output-len: 2
    random-range-ratio: 1.0
    max-concurrency: 4
  warmup: 1
  repeats: 3
  cache: "{{{{ cache }}}}"
"""

PROMPT_TOKENS = 8 * 64  # per run: 8 prompts of 64 tokens


def _playbook(tmp_path: Path) -> Path:
    path = tmp_path / "prefix.yml"
    path.write_text(
        PLAYBOOK.format(serve=json.dumps(SERVE), bench=json.dumps(BENCH), port=free_port())
    )
    return path


def _cached_per_run(cell: Path) -> dict[str, int]:
    """Prompt tokens each run found cached: the sim's counter across the run's captures."""

    def counter(moment: str) -> int:
        info: dict[str, Any] = load(cell / "captures" / f"server_info.{moment}.json")
        return int(info["internal_states"][0]["cached_tokens_total"])

    return {
        "warmup-1": counter("after-warmup-1") - counter("ready"),
        "1": counter("after-1") - counter("after-warmup-1"),
        "2": counter("after-2") - counter("after-1"),
        "3": counter("after-3") - counter("after-2"),
    }


def _run(tmp_path: Path, *extra: str) -> Path:
    pb = _playbook(tmp_path)
    result = orch("apply", pb.name, "--results", "results", *extra, cwd=tmp_path, home=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    (cell,) = (only_run(tmp_path / "results") / "cells").iterdir()
    return cell


def test_by_default_no_measured_repeat_finds_a_cached_prompt(tmp_path: Path) -> None:
    cell = _run(tmp_path)
    cached = _cached_per_run(cell)
    assert cached == {"warmup-1": 0, "1": 0, "2": 0, "3": 0}, cached
    seeds = [load(cell / "bench" / n / "exit.json")["seed"] for n in ("warmup-1", "1", "2", "3")]
    assert len(set(seeds)) == 4, seeds  # one per run, recorded
    exit1 = load(cell / "bench" / "1" / "exit.json")
    assert exit1["seed_flag"] == "--seed"
    assert exit1["argv"][-3:] == ["--flush-cache", "--seed", str(exit1["seed"])]


def test_a_warm_cache_serves_every_repeat_from_the_runs_before(tmp_path: Path) -> None:
    # cache: warm is the old behaviour, the same argv every run: the measured repeats send the
    # warm-up's prompts again and find all of them cached (32 whole blocks of 16 tokens each)
    cell = _run(tmp_path, "-e", "cache=warm")
    cached = _cached_per_run(cell)
    assert cached["warmup-1"] == 64, cached  # the client's warm-up request: the first prompt
    for n in ("1", "2", "3"):
        assert cached[n] == PROMPT_TOKENS + 64, cached  # every prompt, and that one
    assert "seed" not in load(cell / "bench" / "1" / "exit.json")["argv"]


def test_the_plan_says_what_each_repeat_sends(tmp_path: Path) -> None:
    pb = _playbook(tmp_path)
    fresh = orch("plan", pb.name, cwd=tmp_path, home=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    assert (
        "each repeat: 8 random prompts, seed derived per run (--seed), cache flushed after the "
        "client's warm-up request (--flush-cache)"
    ) in fresh.stdout
    warm = orch("plan", pb.name, "-e", "cache=warm", cwd=tmp_path, home=tmp_path)
    assert "8 random prompts, the same each run (cache: warm" in warm.stdout
    ids = [out.splitlines()[2].split()[0] for out in (fresh.stdout, warm.stdout)]
    assert ids[0] != ids[1]  # a warm cache is another workload: another cell id
