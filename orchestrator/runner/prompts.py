"""The prompt sets shipped with the runner: fixed prompts for a greedy-output fingerprint and a
small arithmetic task scored by exact match (offline: nothing is downloaded). Standard library
only; changing either set changes every fingerprint, so they are versioned."""

from __future__ import annotations

from typing import List, Tuple

FINGERPRINT_SET = "orch-prompts-v1"
ACCURACY_TASK = "orch-arithmetic-v1"

FINGERPRINT_PROMPTS = (
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):",
    "The three primary colors are",
    "In 1969, the first humans to walk on the Moon were",
    "Water boils at a temperature of",
    "A haiku about autumn leaves:",
    "The quick brown fox",
    "To make a cup of tea, first",
    "The largest planet in our solar system is",
    "SELECT name, age FROM users WHERE",
    "Photosynthesis is the process by which",
    "The opposite of hot is",
    "import numpy as np\n\narr = np.array([1, 2, 3])\n",
    "My favourite book is about",
    "The speed of light in a vacuum is approximately",
    "Translate to French: Good morning, how are you?",
    "A list of five fruits: apple, banana,",
    "The theory of relativity was developed by",
    "In a distributed system, consensus means",
    "Dear hiring manager, I am writing to",
    "The chemical symbol for gold is",
    "Rain falls when",
    "Step 1: preheat the oven to",
    "The Great Wall of China was built to",
    "for (int i = 0; i < n; i++) {",
    "The human heart has four chambers called",
    "Mount Everest is located in",
    "An electron carries a charge that is",
    "The best way to learn a new language is",
    "Monday, Tuesday, Wednesday,",
    "The meaning of the word 'ephemeral' is",
)


def arithmetic_questions(count: int) -> List[Tuple[str, str]]:
    """`count` (prompt, expected answer) pairs, the same on every host: sums, differences and
    products of small numbers from a fixed linear congruential sequence."""
    out = []
    state = 20240601
    for i in range(count):
        state = (state * 1103515245 + 12345) % (1 << 31)
        a = 2 + state % 89
        state = (state * 1103515245 + 12345) % (1 << 31)
        b = 2 + state % 47
        op = "+-*"[i % 3]
        answer = a + b if op == "+" else (a - b if op == "-" else a * b)
        out.append(("Question: What is %d %s %d?\nAnswer:" % (a, op, b), str(answer)))
    return out


ACCURACY_MAX = 64  # questions the task has
