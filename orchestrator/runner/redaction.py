"""The one secret rule: which names hold secrets, and how secret values are hidden.

Shipped to hosts with the runner and imported by the controller (planner, controller, bundle
writer), so every side answers "is this a secret?" the same way. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any, Collection, Dict, Iterable, List, Optional, Tuple

REDACTED = "***REDACTED***"
# Shorter secret values are not replaced inside text: "abc" or "on" would shred every log.
MIN_SECRET_LENGTH = 4
JSON_REDACT_MAX_BYTES = 64 << 20  # larger JSON is redacted as bytes, streamed
CHUNK = 1 << 20

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_SECRET_WORDS = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def name_parts(name: str) -> List[str]:
    """`name` split into upper-case word parts at `_`, `-`, `.`, other non-alphanumerics and
    camelCase boundaries: `hfToken` -> [HF, TOKEN], `GITHUB_AUTHTOKEN` -> [GITHUB, AUTHTOKEN]."""
    return [p.upper() for p in _WORD_SPLIT.split(_CAMEL.sub("_", name)) if p]


def is_secret_name(name: str, declared: Collection[str] = ()) -> bool:
    """True for names that hold secrets, or that are listed in `declared` (`secrets:`).

    The name is split into word parts (`name_parts`). A part that ends with TOKEN (HF_TOKEN,
    HFTOKEN, hfToken, GITHUB_AUTHTOKEN), is KEY or KEYS or ends with APIKEY (OPENAI_API_KEY,
    apiKey, OPENAI_APIKEY), or contains SECRET, PASSWORD, PASSWD or CREDENTIAL (MY_SECRET,
    DB_PASSWORD) makes the name secret. Whole parts keep TOKENIZER_PATH, MAX_TOKENS, KEYBOARD,
    MONKEY and HOTKEYS non-secret. A KEY part is secret even next to PATH or FILE (SSH_KEY_PATH,
    KEY_PATH): hiding a path costs little, guessing wrong leaks a key.
    """
    if name in declared:
        return True
    for part in name_parts(name):
        if part.endswith("TOKEN") or part in ("KEY", "KEYS") or part.endswith("APIKEY"):
            return True
        for word in _SECRET_WORDS:
            if word in part:
                return True
    return False


def _unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("duplicate key")
    return dict(pairs)


class Redactor:
    """Replaces known secret values in strings, nested data, files and trees.

    A value is also caught as JSON writes it (quotes, backslashes, non-ASCII escaped). Values
    shorter than MIN_SECRET_LENGTH are ignored; name-based redaction still hides them where a
    name is known.
    """

    def __init__(self, values: Iterable[str]) -> None:
        self.values = sorted(
            {v for v in values if len(v) >= MIN_SECRET_LENGTH}, key=len, reverse=True
        )
        forms = set()
        for value in self.values:
            forms.add(value)
            forms.add(json.dumps(value)[1:-1])
            forms.add(json.dumps(value, ensure_ascii=False)[1:-1])
        self.forms = sorted(forms, key=lambda f: (-len(f), f))
        encoded = sorted({f.encode("utf-8") for f in forms}, key=len, reverse=True)
        self.max_len = max((len(f) for f in encoded), default=0)
        self.bytes_re = re.compile(b"|".join(re.escape(f) for f in encoded)) if encoded else None

    def counted_text(self, value: str) -> Tuple[str, int]:
        """`value` with every secret replaced, and how many replacements were made."""
        count = 0
        for form in self.forms:
            n = value.count(form)
            if n:
                count += n
                value = value.replace(form, REDACTED)
        return value, count

    def text(self, value: str) -> str:
        """`value` with every secret replaced."""
        return self.counted_text(value)[0]

    def counted_data(self, obj: Any) -> Tuple[Any, int]:
        """A copy of `obj` with every string (keys too) redacted, and a number that is a secret
        too; with the count of replacements."""
        if isinstance(obj, str):
            return self.counted_text(obj)
        if isinstance(obj, dict):
            out: Dict[str, Any] = {}
            total = 0
            for key, value in obj.items():
                new_key, n_key = self.counted_text(str(key))
                out[new_key], n_value = self.counted_data(value)
                total += n_key + n_value
            return out, total
        if isinstance(obj, (list, tuple)):
            pairs = [self.counted_data(v) for v in obj]
            return [v for v, _ in pairs], sum(n for _, n in pairs)
        if isinstance(obj, (int, float)) and not isinstance(obj, bool) and str(obj) in self.values:
            return REDACTED, 1
        return obj, 0

    def data(self, obj: Any) -> Any:
        """A copy of `obj` with every string redacted, and a number that is a secret too."""
        return self.counted_data(obj)[0]

    def _json_file(self, path: str) -> Optional[int]:
        """A JSON file redacted value by value, so it stays JSON (a numeric secret replaced by
        bytes would leave `"key": ***REDACTED***`); None when it is not JSON or too big."""
        try:
            if os.path.getsize(path) > JSON_REDACT_MAX_BYTES:
                return None
            with open(path, encoding="utf-8") as fh:
                original = json.load(fh, object_pairs_hook=_unique_keys)
        except (OSError, ValueError):  # a duplicate key too: parsing would drop a value unseen
            return None
        redacted, count = self.counted_data(original)
        if count:
            tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".redact.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(redacted, fh, indent=2, ensure_ascii=False, default=str)
                fh.write("\n")
            shutil.copymode(path, tmp)
            os.replace(tmp, path)
        return count

    def count_file(self, path: str, chunk: int = CHUNK) -> int:
        """Redact a file in place (streamed, tmp + rename); how many values were replaced.

        Works on bytes, so a binary or undecodable file is handled too (a leak is worse than a
        damaged blob). A `.json` file is redacted value by value instead, so it stays JSON.
        """
        pattern = self.bytes_re
        if pattern is None:
            return 0
        if path.endswith(".json"):
            structured = self._json_file(path)
            if structured is not None:
                return structured
        keep = self.max_len - 1  # a match may straddle two chunks
        count = 0
        tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".redact.tmp")
        try:
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                carry = b""
                while True:
                    block = src.read(chunk)
                    eof = not block
                    buf = carry + block
                    # Matches starting before `cut` lie wholly in buf; later ones wait for more.
                    cut = len(buf) if eof else max(0, len(buf) - keep)
                    pos = 0
                    for match in pattern.finditer(buf):
                        if match.start() >= cut:
                            break
                        dst.write(buf[pos : match.start()])
                        dst.write(REDACTED.encode())
                        pos = match.end()
                        count += 1
                    consumed = max(pos, cut)
                    dst.write(buf[pos:consumed])
                    carry = buf[consumed:]
                    if eof:
                        dst.write(carry)
                        break
            if count:
                shutil.copymode(path, tmp)
                os.replace(tmp, path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        return count

    def file(self, path: str, chunk: int = CHUNK) -> bool:
        """Redact a file in place; True when something was replaced."""
        return self.count_file(path, chunk) > 0

    def tree(
        self, root: str, chunk: int = CHUNK, skip_errors: bool = False
    ) -> List[Tuple[str, int]]:
        """Redact every regular file under `root` (links are not followed): (path, count) of
        each file that changed. `skip_errors`: a file that cannot be read is passed over."""
        changed: List[Tuple[str, int]] = []
        if self.bytes_re is None:
            return changed
        for dirpath, dirnames, files in os.walk(root):
            dirnames.sort()
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                try:
                    count = self.count_file(path, chunk)
                except OSError:
                    if not skip_errors:
                        raise
                    continue
                if count:
                    changed.append((path, count))
        return changed
