"""A word-level tokenizer over the words the simulator emits, made with a client's own
transformers (the SGLang, GuideLLM and AIPerf client tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from orchestrator.sim.engine import VOCAB

# One word, one token, as the simulator counts, so a client's token counts equal the server's.
TOKENIZER_SCRIPT = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = sys.argv[2:]
vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(dict.fromkeys(words))}}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""


def word_tokenizer(python: str, folder: Path) -> Path:
    """A local tokenizer folder over the simulator's words, made with `python`'s transformers."""
    made = subprocess.run(
        [python, "-c", TOKENIZER_SCRIPT, str(folder), *VOCAB],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return folder
