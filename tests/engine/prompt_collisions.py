"""Run by the engine's interpreter: the prefix-cache hits that vLLM's own random prompts of
the given seeds explain by chance, one run after the other on one cache, counted as vLLM
counts them (whole blocks of 16 tokens, the prompt's last token never served from cache).

    python prompt_collisions.py MODEL NUM_PROMPTS INPUT_LEN OUTPUT_LEN SEED...

prints one JSON object: {"queries": prompt tokens, "hits": cached tokens, "runs": [per run],
"max_rate": the highest hit rate (%) over the requests so far, after any request}.
"""

from __future__ import annotations

import json
import sys

from vllm.benchmarks.datasets.datasets import RandomDataset
from vllm.tokenizers import get_tokenizer

BLOCK = 16


def main(argv: list[str]) -> None:
    model, prompts, input_len, output_len = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    tokenizer = get_tokenizer(model)
    seen: set[tuple[int, ...]] = set()
    queries = hits = 0
    max_rate = 0.0
    runs = []
    for seed in (int(s) for s in argv[4:]):
        sample = RandomDataset(random_seed=seed).sample(
            tokenizer, prompts, input_len=input_len, output_len=output_len
        )
        run_hits = 0
        for request in sample:
            ids = tokenizer.encode(request.prompt)
            blocks = [tuple(ids[:end]) for end in range(BLOCK, len(ids) + 1, BLOCK)]
            found = 0
            for block in blocks[: (len(ids) - 1) // BLOCK]:
                if block not in seen:
                    break
                found += BLOCK
            seen.update(blocks)
            queries += len(ids)
            run_hits += found
            max_rate = max(max_rate, 100.0 * (hits + run_hits) / queries)
        hits += run_hits
        runs.append({"seed": seed, "hits": run_hits})
    print(json.dumps({"queries": queries, "hits": hits, "runs": runs, "max_rate": max_rate}))


if __name__ == "__main__":
    main(sys.argv[1:])
