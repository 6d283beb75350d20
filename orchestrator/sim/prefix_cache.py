"""The simulated server's prefix cache: what SGLang's radix cache (and vLLM's prefix caching)
does to a benchmark, as far as a benchmark can see it.

A prompt's tokens are cached in whole blocks of `BLOCK` tokens, each block named by a hash of
every token up to its end, so a block hits only when the whole prefix before it was seen. A
request finds the leading blocks already there (its cached tokens), then leaves all of its own.
The cache lives as long as the server and is emptied by /flush_cache, as SGLang's is. The
counters are SGLang's Prometheus names: `sglang:prompt_tokens_total`,
`sglang:cached_tokens_total` and the `sglang:cache_hit_rate` gauge. Hits are counted only;
they do not shorten the simulated prefill.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

BLOCK = 16  # tokens per cached block (vLLM's default block size); a shorter prompt never hits


class PrefixCache:
    """Blocks seen since the start or the last flush, and the counters since the start."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.blocks: set[bytes] = set()
        self.prompt_tokens = 0  # every prompt token looked up
        self.cached_tokens = 0  # the ones found in the cache
        self.hit_requests = 0  # requests that found at least one block
        self.last_rate = 0.0  # the latest request's share of cached tokens (SGLang's gauge)

    def lookup(self, tokens: Sequence[str]) -> int:
        """The number of `tokens` already cached (whole leading blocks); the prompt's blocks
        are cached afterwards."""
        digest = hashlib.sha256()
        names = []
        for start in range(0, len(tokens) - len(tokens) % BLOCK, BLOCK):
            for token in tokens[start : start + BLOCK]:
                digest.update(token.encode() + b"\0")
            names.append(digest.copy().digest())
        with self.lock:
            hit = 0
            for name in names:
                if name not in self.blocks:
                    break
                hit += 1
            self.blocks.update(names)
            cached = hit * BLOCK
            self.prompt_tokens += len(tokens)
            self.cached_tokens += cached
            self.hit_requests += 1 if cached else 0
            self.last_rate = cached / len(tokens) if tokens else 0.0
        return cached

    def flush(self) -> None:
        """Forget every cached block (SGLang's /flush_cache); the counters go on."""
        with self.lock:
            self.blocks.clear()

    def stats(self) -> dict[str, Any]:
        """The counters, as /server_info's internal state carries them."""
        with self.lock:
            return {
                "prompt_tokens_total": self.prompt_tokens,
                "cached_tokens_total": self.cached_tokens,
                "cache_hit_requests_total": self.hit_requests,
                "cache_hit_rate": self.last_rate,
            }

    def prometheus(self, model: str) -> str:
        """The counters in Prometheus' text format, under SGLang's metric names."""
        stats = self.stats()
        label = f'{{model_name="{model}"}}'
        return "".join(
            [
                "# TYPE sglang:prompt_tokens_total counter\n",
                f"sglang:prompt_tokens_total{label} {stats['prompt_tokens_total']}.0\n",
                "# TYPE sglang:cached_tokens_total counter\n",
                f"sglang:cached_tokens_total{label} {stats['cached_tokens_total']}.0\n",
                "# TYPE sglang:cache_hit_rate gauge\n",
                f"sglang:cache_hit_rate{label} {stats['cache_hit_rate']}\n",
            ]
        )
