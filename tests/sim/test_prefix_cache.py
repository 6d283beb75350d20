"""The simulator's prefix cache: whole blocks of a repeated prefix hit, a new prompt (even one
sharing its first few tokens) does not, and /flush_cache empties it; the counters go on."""

from __future__ import annotations

import random

from orchestrator.sim.prefix_cache import BLOCK, PrefixCache


def _prompt(rng: random.Random, n: int) -> list[str]:
    return [rng.choice("abcdefghi") for _ in range(n)]


def test_a_repeated_prompt_hits_in_whole_blocks_and_a_flush_forgets_it() -> None:
    rng = random.Random(0)
    cache = PrefixCache()
    first = _prompt(rng, 3 * BLOCK + 5)
    assert cache.lookup(first) == 0
    assert cache.lookup(first) == 3 * BLOCK  # the partial last block is never cached
    longer = first[: 2 * BLOCK] + _prompt(rng, 2 * BLOCK)
    assert cache.lookup(longer) == 2 * BLOCK  # a shared prefix hits up to where they part
    cache.flush()
    assert cache.lookup(first) == 0
    stats = cache.stats()
    assert stats["cached_tokens_total"] == 5 * BLOCK and stats["cache_hit_requests_total"] == 2
    assert stats["prompt_tokens_total"] == 3 * len(first) + len(longer)
    text = cache.prometheus("m")
    assert f'sglang:cached_tokens_total{{model_name="m"}} {5 * BLOCK}.0' in text


def test_fresh_random_prompts_almost_never_hit() -> None:
    # the simulator's client draws its words from 9: whole 16-token blocks never collide
    rng = random.Random(1)
    cache = PrefixCache()
    hits = sum(cache.lookup(_prompt(rng, 64)) for _ in range(2000))
    assert hits == 0
