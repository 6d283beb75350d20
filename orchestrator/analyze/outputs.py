"""Greedy outputs compared (outputs.json, runner/outputs.py): which prompts' answers changed
between two fingerprints, the accuracy on each side, and whether a speculative cell kept the
outputs of its non-speculative twin. Pure functions over recorded documents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.base import Better
from orchestrator.runner.prompts import FINGERPRINT_PROMPTS

# What the output checks put on every measured repeat (analyze/verdict.py), and which way is
# better: no bench adapter's catalogue has them.
OUTPUT_METRICS: dict[str, Better] = {"accuracy": "higher"}

# vLLM documents speculative decoding as lossless up to hardware numerics (its "Lossless
# guarantees" page): a changed greedy answer is a warning to read, not proof of a bug.
SPECULATIVE_PROMISE = (
    "speculative decoding promises the target's own outputs (lossless up to numerics)"
)


@dataclass(frozen=True)
class OutputsChange:
    """Two fingerprints compared: the prompts whose answers differ (indices into the set), of
    how many; `why_not` says why they could not be compared (None when they were)."""

    changed: tuple[int, ...]
    compared: int
    why_not: str | None = None

    @property
    def headline(self) -> str:
        """`outputs changed on 7 of 32 prompts`, `outputs unchanged on 32 prompts`, or why
        they were not compared."""
        if self.why_not is not None:
            return f"outputs not compared: {self.why_not}"
        if self.changed:
            return f"outputs changed on {len(self.changed)} of {self.compared} prompts"
        return f"outputs unchanged on {self.compared} prompts"


def _hashes(fp: Mapping[str, Any]) -> list[str]:
    outputs = fp.get("outputs")
    if not isinstance(outputs, Sequence):
        return []
    return [str(o.get("hash")) for o in outputs if isinstance(o, Mapping)]


def compare_fingerprints(a: Mapping[str, Any], b: Mapping[str, Any]) -> OutputsChange:
    """The prompts whose hashed answers differ between fingerprints `a` and `b`; refused
    (`why_not`) where the prompt set, answer length or what was hashed differ."""
    for key, words in (
        ("set", "prompt sets"),
        ("max_tokens", "max_tokens"),
        ("hashed", "what was hashed"),
    ):
        if a.get(key) != b.get(key):
            return OutputsChange((), 0, f"{words} differ ({a.get(key)} vs {b.get(key)})")
    ha, hb = _hashes(a), _hashes(b)
    both = min(len(ha), len(hb))
    if both == 0:
        return OutputsChange((), 0, "a fingerprint holds no outputs")
    changed = tuple(i for i in range(both) if ha[i] != hb[i])
    return OutputsChange(changed, both)


def prompt_label(index: int) -> str:
    """`prompt 3 ('The three primary colors are')`: the bundled prompt, shortened."""
    text = FINGERPRINT_PROMPTS[index] if 0 <= index < len(FINGERPRINT_PROMPTS) else "?"
    short = text if len(text) <= 40 else text[:37] + "..."
    return f"prompt {index} ({short!r})"


def answer_text(fp: Mapping[str, Any], index: int) -> str | None:
    """The first characters of answer `index`, as recorded."""
    outputs = fp.get("outputs")
    if isinstance(outputs, Sequence) and 0 <= index < len(outputs):
        found = outputs[index]
        if isinstance(found, Mapping):
            return repr(found.get("text"))
    return None


def unstable_passes(fp: Mapping[str, Any]) -> list[int]:
    """Prompts whose answers differed between passes of one server (`fingerprint.passes`)."""
    passes = fp.get("passes")
    if not isinstance(passes, Sequence) or len(passes) < 2:
        return []
    first = list(passes[0].get("hashes") or [])
    out: set[int] = set()
    for other in passes[1:]:
        hashes = list(other.get("hashes") or [])
        out.update(i for i, h in enumerate(hashes) if i < len(first) and first[i] != h)
    return sorted(out)


def accuracy_of(doc: Mapping[str, Any]) -> float | None:
    """The accuracy task's share correct, when it ran."""
    acc = doc.get("accuracy")
    value = acc.get("accuracy") if isinstance(acc, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def speculates(cell: Mapping[str, Any]) -> bool:
    """Whether a recorded cell's server decodes speculatively (a `speculative*` server flag
    set: SGLang's `speculative-algorithm`, vLLM's `speculative-config`)."""
    server = cell.get("server")
    args = server.get("args") if isinstance(server, Mapping) else None
    if not isinstance(args, Mapping):
        return False
    return any(
        "speculative" in str(k).replace("_", "-") and v not in (None, False, "")
        for k, v in args.items()
    )


def speculative_warning(
    cell_a: Mapping[str, Any], cell_b: Mapping[str, Any], change: OutputsChange
) -> str | None:
    """A warning when exactly one of two cells speculates and their greedy outputs differ."""
    if change.why_not is not None or not change.changed or speculates(cell_a) == speculates(cell_b):
        return None
    side = "B" if speculates(cell_b) else "A"
    return (
        f"{side} decodes speculatively and its greedy outputs differ from the other's on "
        f"{len(change.changed)} of {change.compared} prompts; {SPECULATIVE_PROMISE}"
    )


def outputs_summary(doc: Any) -> dict[str, Any]:
    """metrics.json's `outputs`: the fingerprint's digest, prompts, what was hashed and whether
    its passes agreed, and the accuracy; empty without outputs.json."""
    if not isinstance(doc, Mapping):
        return {}
    out: dict[str, Any] = {}
    fp = doc.get("fingerprint")
    if isinstance(fp, Mapping) and fp.get("digest"):
        out.update(fingerprint=fp["digest"], prompts=fp.get("prompts"), hashed=fp.get("hashed"))
        if "stable" in fp:
            out["stable"] = bool(fp["stable"])
    acc = doc.get("accuracy")
    if isinstance(acc, Mapping):
        out.update(accuracy=acc.get("accuracy"), questions=acc.get("questions"))
    return out
