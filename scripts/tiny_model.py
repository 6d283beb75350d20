"""Make a tiny random Llama model that a real vLLM (CPU build) can serve, without any hub access.

Usage: python scripts/tiny_model.py OUT_DIR  (under the engine venv's python: it needs torch,
safetensors, tokenizers and transformers; `scripts/engine.sh` runs it).

What lands in OUT_DIR, byte for byte the same on every run with the same package versions:
- config.json: a LlamaForCausalLM, hidden 128, 2 layers, 4 heads of 32 (the CPU attention has no
  kernel for head size 16), bfloat16;
- model.safetensors: random weights from a fixed seed (normal * 0.02, norms at 1);
- tokenizer.json: a byte-level BPE (vocabulary VOCAB_SIZE) trained on text generated from a
  fixed seed, so any byte string encodes; tokenizer_config.json with a ChatML chat_template;
- generation_config.json: the BOS and EOS ids and nothing else, so vLLM takes no sampling
  defaults from it.

The weights are random: the model's text is noise. It exists to run the real engine end to end
(startup, batching, the OpenAI API, the benchmark client) in a few seconds per request on 2 cores.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig

SEED = 1234
VOCAB_SIZE = 1024
HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 4
HEAD_DIM = HIDDEN // HEADS  # 32: vLLM's CPU attention supports 32, 64, 80, 96, 112, 128, ...
MAX_POSITIONS = 2048
DTYPE = torch.bfloat16
INIT_STD = 0.02

BOS, EOS, PAD, IM_START, IM_END = "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, IM_START, IM_END]  # ids 0..4, in this order
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def corpus(seed: int, lines: int = 4000) -> Iterator[str]:
    """Yield deterministic pseudo-English lines: words built from syllables, digits, punctuation."""
    rng = random.Random(seed)
    onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w"]
    onsets += ["st", "tr", "pl", "ch", "sh", "th", "gr", "br"]
    nuclei = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "oo", "ie"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck"]
    words = [
        "".join(
            rng.choice(onsets) + rng.choice(nuclei) + rng.choice(codas)
            for _ in range(rng.randint(1, 3))
        )
        for _ in range(600)
    ]
    punctuation = [".", ",", "!", "?", ";", ":"]
    for _ in range(lines):
        parts = []
        for _ in range(rng.randint(4, 16)):
            roll = rng.random()
            if roll < 0.05:
                parts.append(str(rng.randint(0, 9999)))
            elif roll < 0.15:
                parts.append(rng.choice(words).capitalize())
            else:
                parts.append(rng.choice(words))
        yield " ".join(parts) + rng.choice(punctuation)


def build_tokenizer(seed: int) -> Tokenizer:
    """Train the byte-level BPE on the generated corpus; BOS is prepended on encode."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(seed), trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS} $A",
                pair=f"{BOS} $A {BOS} $B",
                special_tokens=[(BOS, bos_id)],
            ),
        ]
    )
    return tokenizer


def build_config(vocab_size: int, bos_id: int, eos_id: int, pad_id: int) -> dict[str, object]:
    """The config.json content: a LlamaConfig, checked by transformers, with the architecture."""
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        architectures=["LlamaForCausalLM"],
        dtype="bfloat16",
    )
    data: dict[str, object] = config.to_diff_dict()
    return data


def build_weights(vocab_size: int, seed: int) -> dict[str, torch.Tensor]:
    """Random weights under Hugging Face Llama's tensor names, drawn from one seeded generator."""
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * INIT_STD).to(DTYPE).contiguous()

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=DTYPE)

    q_out, kv_out = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    weights = {"model.embed_tokens.weight": normal(vocab_size, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        weights[f"{p}.input_layernorm.weight"] = ones(HIDDEN)
        weights[f"{p}.self_attn.q_proj.weight"] = normal(q_out, HIDDEN)
        weights[f"{p}.self_attn.k_proj.weight"] = normal(kv_out, HIDDEN)
        weights[f"{p}.self_attn.v_proj.weight"] = normal(kv_out, HIDDEN)
        weights[f"{p}.self_attn.o_proj.weight"] = normal(HIDDEN, q_out)
        weights[f"{p}.post_attention_layernorm.weight"] = ones(HIDDEN)
        weights[f"{p}.mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        weights[f"{p}.mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        weights[f"{p}.mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
    weights["model.norm.weight"] = ones(HIDDEN)
    weights["lm_head.weight"] = normal(vocab_size, HIDDEN)
    return weights


def write_json(path: Path, data: object) -> None:
    """Write JSON with sorted keys and a final newline, so reruns give the same bytes."""
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def make(out: Path, seed: int = SEED) -> None:
    """Write the whole model (config, weights, tokenizer, generation config) into `out`."""
    random.seed(seed)
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(seed)
    tokenizer.save(str(out / "tokenizer.json"))
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    bos_id, eos_id, pad_id, im_end_id = (tokenizer.token_to_id(t) for t in (BOS, EOS, PAD, IM_END))

    write_json(out / "config.json", build_config(vocab_size, bos_id, eos_id, pad_id))
    weights = out / "model.safetensors"
    save_file(build_weights(vocab_size, seed), str(weights), {"format": "pt"})
    weights.chmod(0o644)  # safetensors creates it 0600; the rest are 0644 (umask)
    write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS,
            "eos_token": EOS,
            "pad_token": PAD,
            "model_max_length": MAX_POSITIONS,
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    write_json(
        out / "special_tokens_map.json",
        {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD},
    )
    # The chat turn ends with <|im_end|>: stop there as well as at </s>.
    write_json(
        out / "generation_config.json",
        {"bos_token_id": bos_id, "eos_token_id": [eos_id, im_end_id], "pad_token_id": pad_id},
    )


def main(argv: list[str]) -> int:
    """Parse the one argument (the output folder) and make the model there."""
    if len(argv) != 1:
        print("usage: tiny_model.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    make(out)
    print(f"tiny_model: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
