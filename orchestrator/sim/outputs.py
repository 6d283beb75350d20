"""What the simulated model answers: greedy outputs as a pure function of (model, prompt, the
repo's code), so a fingerprint is the same on every start and host, and a commit with the
`wrong-output` bug changes the answers of a share of the prompts (and of the arithmetic ones:
the sum is off by one). Token ids come back as vLLM gives them (`return_token_ids`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from orchestrator.sim.engine import VOCAB

VOCAB_SIZE = 32000
_QUESTION = re.compile(r"What is (-?\d+) ([+*-]) (-?\d+)\?")


def _unit(*parts: str) -> float:
    """A number in [0, 1) fixed by `parts`."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def wrong_share(params: Mapping[str, Any]) -> float:
    """The share of prompts whose answer the repo's bug changes (0 without the bug)."""
    bugs = params.get("bugs") or {}
    return float(bugs.get("wrong_outputs") or 0.0)


def is_wrong(prompt: str, params: Mapping[str, Any]) -> bool:
    """Whether the bug changes this prompt's answer: a fixed draw per prompt, so the prompts
    changed are the same on every run of one commit."""
    return _unit("wrong", prompt) < wrong_share(params)


def answer_words(model: str, prompt: str, params: Mapping[str, Any], count: int) -> list[str]:
    """The first `count` words of the greedy answer (one word per token)."""
    wrong = is_wrong(prompt, params)
    words: list[str] = []
    found = _QUESTION.search(prompt)
    if found:
        a, op, b = int(found.group(1)), found.group(2), int(found.group(3))
        value = a + b if op == "+" else (a - b if op == "-" else a * b)
        words.append(str(value + 1 if wrong else value))
    salt = "wrong" if wrong else ""
    while len(words) < count:
        pick = _unit(model, prompt, salt, str(len(words)))
        words.append(VOCAB[int(pick * len(VOCAB))])
    return words[:count]


def token_id(word: str) -> int:
    """A word's token id in the simulated vocabulary."""
    return int(hashlib.sha256(word.encode()).hexdigest()[:8], 16) % VOCAB_SIZE


def answer(model: str, prompt: str, params: Mapping[str, Any], count: int) -> tuple[str, list[int]]:
    """(text, token ids) of the greedy answer of `count` tokens."""
    words = answer_words(model, prompt, params, count)
    return "".join(" " + w for w in words), [token_id(w) for w in words]
