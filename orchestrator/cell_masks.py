"""How a cell id hashes secret values: each as its name's placeholder, wherever it appears.

A Cell's id must not change when a secret's value rotates, and must never carry the value: the
id hashes canonical JSON in which every secret value is replaced by `<secret:NAME>`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache


def secret_placeholder(name: str) -> str:
    """What a cell id hashes in place of the value of secret `name`."""
    return f"<secret:{name}>"


def secret_masks(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """{value: name} from (name, value) pairs; a value under two names gets the first in order."""
    masks: dict[str, str] = {}
    for name, value in sorted(pairs):
        if value:
            masks.setdefault(value, name)
    return masks


MIN_MASKED_SUBSTRING = 4  # as redaction's MIN_SECRET_LENGTH: shorter values only as whole strings


@lru_cache(maxsize=256)
def _mask_pattern(masks: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str], dict[str, str]]:
    replace: dict[str, str] = {}
    for value, name in masks:
        escaped = json.dumps(value, ensure_ascii=False)  # as canonical_json writes it
        if len(value) >= MIN_MASKED_SUBSTRING:
            replace.setdefault(escaped[1:-1], secret_placeholder(name))
        else:
            replace.setdefault(escaped, json.dumps(secret_placeholder(name)))
    alternatives = sorted(replace, key=lambda t: (-len(t), t))  # longest first: no partial hits
    return re.compile("|".join(re.escape(t) for t in alternatives)), replace


def mask_secrets(text: str, masks: Mapping[str, str]) -> str:
    """Canonical JSON `text` with each secret value (`masks`: value -> name) as its placeholder.

    One pass, so a placeholder is never masked again. A value of `MIN_MASKED_SUBSTRING`
    characters or more is replaced wherever it appears (inside an argv item or a URL); a shorter
    one only where it is a whole JSON string (masking every "1" would hide unrelated numbers).
    """
    if not masks:
        return text
    pattern, replace = _mask_pattern(tuple(sorted(masks.items())))
    return pattern.sub(lambda m: replace[m.group(0)], text)
