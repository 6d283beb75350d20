"""The one secret rule: which names hold secrets, and how secret values are hidden.

Shipped to hosts with the runner and imported by the controller (planner, controller, bundle
writer), so every side answers "is this a secret?" the same way. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any, Collection, Dict, Iterable, Iterator, List, Optional, Set, Tuple

REDACTED = "***REDACTED***"
# Shorter secret values are redacted by name only, never replaced inside text (see Redactor).
MIN_SECRET_LENGTH = 8
JSON_REDACT_MAX_BYTES = 64 << 20  # larger JSON is redacted as bytes, streamed
CHUNK = 1 << 20

# Credentials inside a URL (`https://user:pw@host`, `https://TOKEN@host`, `ssh://git:pw@host`) are
# secret whatever their length or name: the user part too for http(s) (a token is often the user),
# only the password for ssh (its user is a login name). The userinfo is bounded (256 bytes) so a
# streamed file needs a bounded carry.
_URL_CREDENTIALS = re.compile(rb"([A-Za-z][A-Za-z0-9+.-]{0,20}://)([^\s/@'\"<>]{1,256})@")
_SSH_SCHEMES = (b"ssh://", b"git+ssh://", b"ssh+git://")
_URL_CARRY = 300


def _masked_credentials(match: "re.Match[bytes]") -> Tuple[bytes, int]:
    """The replacement of one URL-credentials match, and 1 when it hides something."""
    scheme, info = match.group(1), match.group(2)
    if info == REDACTED.encode() or info.endswith(b":" + REDACTED.encode()):
        return match.group(0), 0
    if scheme.lower() in _SSH_SCHEMES:
        user, colon, _password = info.partition(b":")
        if not colon:
            return match.group(0), 0  # ssh://git@host: a login name, nothing secret
        return scheme + user + b":" + REDACTED.encode() + b"@", 1
    return scheme + REDACTED.encode() + b"@", 1


def mask_url_credentials(text: str) -> Tuple[str, int]:
    """`text` with the credentials of every URL in it hidden, and how many were."""
    if "@" not in text or "://" not in text:
        return text, 0
    count = 0

    def sub(match: "re.Match[bytes]") -> bytes:
        nonlocal count
        out, n = _masked_credentials(match)
        count += n
        return out

    masked = _URL_CREDENTIALS.sub(sub, text.encode("utf-8", "surrogateescape"))
    return masked.decode("utf-8", "surrogateescape"), count


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


# What a template reads: identifiers inside `{{ }}` / `{% %}`, string literals left out. An
# over-approximation (filter and test names count too): hiding one more value costs little.
_TEMPLATE_BLOCK = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)
_TEMPLATE_STRING = re.compile(r"'[^']*'|\"[^\"]*\"")
_TEMPLATE_NAME = re.compile(r"(?<![\w.])[A-Za-z_][A-Za-z0-9_]*")
# The names templates get from orch itself (config/values.py reserves them).
ORCH_TEMPLATE_NAMES = (
    "matrix",
    "inventory_hostname",
    "group_names",
    "groups",
    "hostvars",
    "orch_python",
    # a server over several hosts (plan/nodes.py); a one-node cell sees rank 0 of 1
    "node_rank",
    "nnodes",
    "head_host",
    "head_port",
    "node_hosts",
)

# Names a template reads that are no variable of the playbook: orch's own (the whole matrix
# must not turn secret through `{{ matrix.tok }}`) and Jinja's words.
_NOT_VARIABLES = frozenset(
    [
        *ORCH_TEMPLATE_NAMES,
        "vars",
        "loop",
        "range",
        "true",
        "false",
        "none",
        "True",
        "False",
        "None",
        "and",
        "or",
        "not",
        "in",
        "is",
        "if",
        "else",
        "elif",
        "endif",
        "for",
        "endfor",
    ]
)


def template_names(text: str) -> List[str]:
    """The variable names a template text may read (`Bearer {{ tok }}` -> ["tok"])."""
    names: List[str] = []
    for match in _TEMPLATE_BLOCK.finditer(text):
        body = _TEMPLATE_STRING.sub(" ", match.group(1) or match.group(2) or "")
        names.extend(n for n in _TEMPLATE_NAME.findall(body) if n not in _NOT_VARIABLES)
    return names


def tainted_secret_names(documents: Iterable[Any], declared: Collection[str] = ()) -> List[str]:
    """Names whose values reach a secret through a template, across all `documents` (sorted).

    `env: {HF_TOKEN: "Bearer {{ tok }}"}` makes `tok` secret: its value is part of the token.
    Followed through every mapping key that holds templates (`tok: "{{ raw }}"` taints `raw`
    too), in any document (a playbook, its bases and vars files define variables apart).
    """
    uses: Dict[str, Set[str]] = {}  # name -> names its templates read

    def strings(node: Any) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from strings(value)
        elif isinstance(node, (list, tuple)):
            for item in node:
                yield from strings(item)

    seeds: Set[str] = set()

    def walk(node: Any, depth: int = 0) -> None:
        if depth > 100:
            return
        if isinstance(node, dict):
            for key, value in node.items():
                reads = {n for text in strings(value) for n in template_names(text)}
                if isinstance(key, str):
                    uses.setdefault(key, set()).update(reads)
                    if key != "secrets" and is_secret_name(key, declared):
                        seeds.update(reads)
                walk(value, depth + 1)
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item, depth + 1)

    for document in documents:
        walk(document)
    tainted: Set[str] = set()
    todo = list(seeds)
    while todo:
        name = todo.pop()
        if name in tainted:
            continue
        tainted.add(name)
        todo.extend(uses.get(name, ()))
    return sorted(tainted)


def _unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("duplicate key")
    return dict(pairs)


def short_secret_names(values: Dict[str, Any]) -> List[str]:
    """The names (sorted) of secrets in `values` (name -> value, only secrets) too short to be
    redacted by value: the plan-time warning lists them.

    The rule: a secret value under MIN_SECRET_LENGTH (8) characters is redacted by name only.
    Where orch writes it under its name (cell.json env, server.json, argv after a secret flag)
    it is hidden; inside free text (logs, captures, reasons, paths) it is left as is, because
    replacing `runs`, `orch` or `1201` everywhere would shred every log and path. Such a value
    printed by a server into its log stays visible there.
    """
    short = []
    for name, value in values.items():
        if value is None or isinstance(value, (bool, dict, list)):
            continue
        if len(str(value)) < MIN_SECRET_LENGTH:
            short.append(str(name))
    return sorted(short)


def env_secret_values(env: Dict[str, str], declared: Collection[str] = ()) -> List[str]:
    """The values of every secret-named variable of `env` (e.g. the environment a runner starts
    processes with, GITHUB_TOKEN included), for a Redactor (which drops the short ones)."""
    return [v for k, v in env.items() if v and is_secret_name(k, declared)]


class Redactor:
    """Replaces known secret values in strings, nested data, files and trees.

    A value is also caught as JSON writes it (quotes, backslashes, non-ASCII escaped). Values
    shorter than MIN_SECRET_LENGTH (8 characters) are ignored: they are redacted by name only
    (see `short_secret_names`), since a short value replaced inside text destroys the text.
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
        self.max_len = max([_URL_CARRY, *(len(f) for f in encoded)])
        # The values first (longest first), then URL credentials: one pass over a file.
        alternatives = [re.escape(f) for f in encoded] + [_URL_CREDENTIALS.pattern]
        self.bytes_re = re.compile(b"|".join(b"(?:" + a + b")" for a in alternatives))
        self._url_group = 1  # the URL pattern's groups are the only groups of bytes_re

    def counted_text(self, value: str) -> Tuple[str, int]:
        """`value` with every secret (and every URL's credentials) replaced, and how many
        replacements were made."""
        count = 0
        for form in self.forms:
            n = value.count(form)
            if n:
                count += n
                value = value.replace(form, REDACTED)
        value, masked = mask_url_credentials(value)
        return value, count + masked

    def _replacement(self, match: "re.Match[bytes]") -> Tuple[bytes, int]:
        if match.group(self._url_group) is not None:
            return _masked_credentials(match)
        return REDACTED.encode(), 1

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
        if path.endswith(".json"):
            structured = self._json_file(path)
            if structured is not None:
                return structured
        keep = self.max_len - 1  # a match may straddle two chunks
        if not self._has_match(path, chunk, keep):
            return 0  # read once, nothing rewritten (most files of most cells)
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
                        replacement, n = self._replacement(match)
                        dst.write(replacement)
                        pos = match.end()
                        count += n
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

    def _has_match(self, path: str, chunk: int, keep: int) -> bool:
        """Whether the file holds anything to replace (streamed, bounded memory)."""
        with open(path, "rb") as src:
            carry = b""
            while True:
                block = src.read(chunk)
                if not block:
                    return False
                buf = carry + block
                for match in self.bytes_re.finditer(buf):
                    if self._replacement(match)[1]:
                        return True
                carry = buf[-keep:] if keep > 0 else b""

    def file(self, path: str, chunk: int = CHUNK) -> bool:
        """Redact a file in place; True when something was replaced."""
        return self.count_file(path, chunk) > 0

    def tree(
        self, root: str, chunk: int = CHUNK, skip_errors: bool = False
    ) -> List[Tuple[str, int]]:
        """Redact every regular file under `root` (links are not followed): (path, count) of
        each file that changed. `skip_errors`: a file that cannot be read is passed over."""
        changed: List[Tuple[str, int]] = []
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
