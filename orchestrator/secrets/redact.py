"""Redaction on the controller's side: secret values never reach a bundle or the terminal.

The name rule and the value redactor are `orchestrator.runner.redaction`'s (the runner ships
that same module); this module adds what only the controller needs. Two complementary rules.
By name: a value stored under a secret-looking name (see `is_secret_name`) or a name the
playbook lists in `secrets:` is replaced, in structured data, argv, YAML source and printed
`-e` values. By value: every known secret value (the env values of those names) is replaced
wherever it appears as text, in every file of a tree, so a token echoed into `server.log` is
caught too. The playbook's own files are copied into a bundle as written, so every value under
a secret name in them is hidden too, the values a later layer overrode included
(`redact_yaml_file`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.cell import Cell
from orchestrator.runner.redaction import MIN_SECRET_LENGTH as MIN_SECRET_LENGTH
from orchestrator.runner.redaction import REDACTED as REDACTED
from orchestrator.runner.redaction import Redactor, tainted_secret_names
from orchestrator.runner.redaction import is_secret_name as is_secret_name

_SIBLING_MAX_BYTES = 16 << 20  # as the playbook loader's own limit on an input file
SECRETS_KEY = "secrets"  # the playbook's list of secret *names*: never a value to hide
_CHUNK = 4 * 1024 * 1024


def _norm(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").upper()


class _Names:
    """Secret-name matching: the patterns plus explicit names (`--hf-token` matches HF_TOKEN)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.explicit = {_norm(n) for n in names if n}

    def __call__(self, name: str) -> bool:
        return _norm(name) in self.explicit or is_secret_name(name)


_ASSIGN = re.compile(r"(?<![\w.-])([A-Za-z_][A-Za-z0-9_]*)=(\"[^\"]*\"|'[^']*'|[^\s\"',;&|]+)")
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w.-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|[^\s\"'-][^\s\"']*)")


def _redact_string(text: str, is_secret: _Names) -> str:
    """`HF_TOKEN=x` and `--api-key x` / `--api-key=x` inside one string."""

    def assign(m: re.Match[str]) -> str:
        return f"{m.group(1)}={REDACTED}" if is_secret(m.group(1)) else m.group(0)

    def flag(m: re.Match[str]) -> str:
        if is_secret(m.group(1).lstrip("-")):
            return f"{m.group(1)}{m.group(2)}{REDACTED}"
        return m.group(0)

    if "=" in text:
        text = _ASSIGN.sub(assign, text)
    if "-" in text:
        text = _FLAG.sub(flag, text)
    return text


def _redact_argv(items: list[Any], is_secret: _Names) -> list[Any]:
    """An argv-like list: the item after a secret flag (`--api-key`, `X`) is the secret."""
    out: list[Any] = []
    hide_next = False
    for item in items:
        if hide_next and isinstance(item, str | int | float) and not isinstance(item, bool):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if isinstance(item, str) and item.startswith("-") and "=" not in item:
            hide_next = is_secret(item.lstrip("-"))
        out.append(item)
    return out


def _walk(data: Any, is_secret: _Names) -> Any:
    if isinstance(data, Mapping):
        out: dict[Any, Any] = {}
        for key, value in data.items():
            secret_key = isinstance(key, str) and is_secret(key)
            scalar = isinstance(value, str | int | float) and not isinstance(value, bool)
            if secret_key and scalar and value != "":
                out[key] = REDACTED
            else:
                out[key] = _walk(value, is_secret)
        return out
    if isinstance(data, list | tuple):
        items = [_walk(v, is_secret) for v in _redact_argv(list(data), is_secret)]
        return items if isinstance(data, list) else tuple(items)
    if isinstance(data, str):
        return _redact_string(data, is_secret)
    return data


def redact_mapping(data: Any, secret_names: Iterable[str]) -> Any:
    """A copy of JSON-like `data` with secrets hidden by name, recursively.

    Scalar values under a secret key (`{"HF_TOKEN": "hf_x"}`), the argument after a secret flag
    in a list (`["--api-key", "x"]`), and `NAME=value`, `--flag=value`, `--flag value` inside
    strings become `REDACTED`. Containers under secret keys are walked, not dropped (so
    `"secrets": ["HF_TOKEN"]`, a list of names, survives). `secret_names` adds names to the
    patterns; they match case- and separator-insensitively (`--hf-token` matches `HF_TOKEN`).
    """
    return _walk(data, _Names(secret_names))


def secret_values(env: Mapping[str, str], names: Iterable[str] = ()) -> list[str]:
    """The values of `env` whose names are secret (patterns or `names`), longest first.

    Values shorter than `MIN_SECRET_LENGTH` are left out: replacing them everywhere would
    mangle unrelated text, and name-based redaction still hides them in structured data.
    """
    is_secret = _Names(names)
    values = {str(v) for k, v in env.items() if is_secret(k) and len(str(v)) >= MIN_SECRET_LENGTH}
    return sorted(values, key=lambda v: (-len(v), v))


# A template that only names variables (`{{ hf_token }}`) holds no secret; one with a quoted
# literal (`{{ x | default('hf_...') }}`) may.
_REFERENCE = re.compile(r"\s*(?:\{\{[^'\"{}]*\}\}\s*)+")


def _secret_scalar(value: Any) -> str | None:
    """The text of a scalar that can hold a secret; None for bools, nulls, "" and references."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    text = str(value)
    if not text or _REFERENCE.fullmatch(text):
        return None
    return text


def secret_items_in(data: Any, names: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(name, value) of every scalar stored under a secret name at any depth of `data`, sorted.

    `{"vars": {"db": {"password": "x"}}}` gives `[("password", "x")]`. Under a secret name every
    scalar at any depth is secret (`api_keys: [a, b]`), except in the playbook's `secrets:` key,
    a list of names. Templates that only name variables (`{{ hf_token }}`), bools, nulls and ""
    are left out.
    """
    is_secret = _Names(names)
    found: set[tuple[str, str]] = set()

    def scalars(node: Any) -> Iterator[str]:
        if isinstance(node, Mapping):
            for value in node.values():
                yield from scalars(value)
        elif isinstance(node, list | tuple):
            for item in node:
                yield from scalars(item)
        else:
            text = _secret_scalar(node)
            if text is not None:
                yield text

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if isinstance(key, str) and is_secret(key) and key != SECRETS_KEY:
                    found.update((key, text) for text in scalars(value))
                walk(value)
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item)

    walk(data)
    return sorted(found)


def secret_values_in(data: Any, names: Iterable[str] = ()) -> list[str]:
    """Every scalar stored under a secret name (patterns or `names`) at any depth of `data`.

    The values of `secret_items_in`, longest first (as `secret_values`).
    """
    values = {value for _, value in secret_items_in(data, names)}
    return sorted(values, key=lambda v: (-len(v), v))


_YAML_SKIP_TAGS = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:null")
_NODE_PROPERTIES = re.compile(r"(?:[&!]\S*\s+)*")  # an anchor or tag before a scalar


_NODE_BUDGET = 200_000  # values read for the taint walk; an alias bomb stops here, not later


def _node_data(node: yaml.Node | None, budget: list[int], memo: dict[int, Any]) -> Any:
    """Plain data for a composed node, aliases shared (never expanded twice), within budget."""
    if node is None or budget[0] <= 0:
        return None
    if id(node) in memo:
        return memo[id(node)]
    budget[0] -= 1
    if isinstance(node, yaml.ScalarNode):
        memo[id(node)] = str(node.value)
    elif isinstance(node, yaml.SequenceNode):
        items: list[Any] = []
        memo[id(node)] = items
        items.extend(_node_data(item, budget, memo) for item in node.value)
    elif isinstance(node, yaml.MappingNode):
        mapping: dict[Any, Any] = {}
        memo[id(node)] = mapping
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                mapping[str(key.value)] = _node_data(value, budget, memo)
    return memo.get(id(node))


def yaml_documents(text: str) -> list[Any]:
    """The data of every YAML/JSON document in `text` as strings, lists and mappings (scalars
    untyped); [] when it is not YAML. For the taint walk (`tainted_secret_names`)."""
    try:
        roots = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return []
    budget = [_NODE_BUDGET]
    return [_node_data(root, budget, {}) for root in roots]


def secret_names_of(documents: Iterable[Any], names: Iterable[str] = ()) -> list[str]:
    """`names` plus every variable whose value reaches a secret through a template
    (`HF_TOKEN: "Bearer {{ tok }}"` adds `tok`), over all `documents` together."""
    names = list(names)
    return sorted({*names, *tainted_secret_names(list(documents), names)})


def redact_yaml_text(
    text: str, names: Iterable[str] = (), documents: Iterable[Any] = ()
) -> tuple[str, list[str]]:
    """`text` (YAML or JSON) with every scalar under a secret name replaced, and those values.

    Works on the source text, not on re-dumped data: comments, order and layout stay as the
    user wrote them, and the result is still valid YAML/JSON (`"***REDACTED***"`, quoted).
    Plain, quoted and block scalars alike are replaced whole; an anchor or tag before the value
    is kept. Text that is not YAML is returned unchanged, with no values. A variable a secret's
    template reads is secret too (`tok` of `HF_TOKEN: "Bearer {{ tok }}"`), whether the
    template is in `text` or in `documents` (the data of the playbook's other files).
    """
    try:
        roots = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return text, []
    budget = [_NODE_BUDGET]
    own = [_node_data(root, budget, {}) for root in roots]
    is_secret = _Names(secret_names_of([*own, *documents], names))
    spans: dict[tuple[int, int], str] = {}
    seen: set[int] = set()

    def hide_all(node: yaml.Node, depth: int = 0) -> None:
        """Every scalar at or below `node` (the value of a secret name)."""
        if depth > 100:
            return  # a recursive alias
        if isinstance(node, yaml.ScalarNode):
            if node.tag not in _YAML_SKIP_TAGS and _secret_scalar(node.value) is not None:
                spans[(node.start_mark.index, node.end_mark.index)] = str(node.value)
        elif isinstance(node, yaml.MappingNode):
            for _key, value in node.value:
                hide_all(value, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                hide_all(item, depth + 1)

    def walk(node: yaml.Node) -> None:
        if id(node) in seen:  # an alias: the anchored node was walked already
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if (
                    isinstance(key, yaml.ScalarNode)
                    and is_secret(str(key.value))
                    and key.value != SECRETS_KEY
                ):
                    hide_all(value)
                walk(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)

    for root in roots:
        if root is not None:
            walk(root)
    out = text
    for start, end in sorted(spans, reverse=True):  # from the end: earlier offsets stay valid
        source = out[start:end]
        head = _NODE_PROPERTIES.match(source)
        keep = head.group(0) if head else ""
        body = source[len(keep) :]
        tail = body[len(body.rstrip()) :]  # a block scalar's span ends with its line break
        out = out[:start] + keep + json.dumps(REDACTED) + tail + out[end:]
    return out, sorted(set(spans.values()), key=lambda v: (-len(v), v))


def _sibling_documents(root: Path) -> list[Any]:
    """The data of every YAML/JSON file in a bundle's `playbook/` folder (a template in one
    file can make a variable of another secret)."""
    documents: list[Any] = []
    for other in sorted(root.rglob("*")):
        if other.suffix not in (".yml", ".yaml", ".json") or other.is_symlink():
            continue
        try:
            if other.is_file() and other.stat().st_size <= _SIBLING_MAX_BYTES:
                documents.extend(yaml_documents(other.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return documents


def redact_yaml_file(path: Path, names: Iterable[str] = ()) -> list[str]:
    """Hide every value under a secret name in one YAML/JSON file, in place (tmp + rename).

    Returns the values hidden, so a caller can also scrub them wherever else they appear. A
    file that is not UTF-8 YAML is left alone (the by-value sweep still covers it).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    out, values = redact_yaml_text(text, names)
    if out != text:
        tmp = path.with_name(f".{path.name}.redact.tmp")
        tmp.write_text(out, encoding="utf-8")
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    return values


def redact_playbook_copy(root: Path, paths: Iterable[Path], names: Iterable[str] = ()) -> list[str]:
    """`redact_yaml_file` on each copied playbook file under `root` (a bundle's `playbook/`):
    a template in one file can make another file's variable secret, so the names every file
    makes secret are found first, while every copy is still as written. The values hidden."""
    names = list(names)
    every = sorted({*names, *secret_names_of(_sibling_documents(root), names)})
    return [value for path in paths for value in redact_yaml_file(path, every)]


SECRET_HINT = "<secret>"  # what a printed command shows for a secret the user gives again
_PLAIN_WORD = re.compile(r"[^\s'\"\\]*")


def _hide_extra_value(text: str, is_secret: _Names, marker: str) -> str:
    """One `-e` argument with its secret values as `marker`."""
    if text.startswith("@"):
        return text  # a file name; the file holds the values
    if text.lstrip()[:1] in ("{", "["):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            return marker if REDACTED in text else text

        def hide(node: Any, secret: bool = False) -> Any:
            if isinstance(node, Mapping):
                return {k: hide(v, isinstance(k, str) and is_secret(k)) for k, v in node.items()}
            if isinstance(node, list):
                return [hide(v) for v in node]
            if (secret and _secret_scalar(node) is not None) or (
                isinstance(node, str) and REDACTED in node
            ):
                return marker
            return node

        return json.dumps(hide(data), ensure_ascii=False)
    try:
        tokens = shlex.split(text)
    except ValueError:
        return marker if REDACTED in text else text
    out = []
    for token in tokens:
        name, sep, value = token.partition("=")
        if sep and (is_secret(name) or REDACTED in value):
            token = f"{name}={marker}"
        out.append(token if _PLAIN_WORD.fullmatch(token) else shlex.quote(token))
    return " ".join(out)


def hide_secret_extra_vars(
    argv: Sequence[str], names: Iterable[str] = (), marker: str = SECRET_HINT
) -> list[str]:
    """`argv` with each secret `-e` value as `marker` (`<secret>`: a command to print, holding
    no secret; run.json records REDACTED), however short the value.

    A value is secret when its name is (patterns or `names`) or it holds the redaction marker
    (argv as run.json records it). `-e k=v ...`, `-e '{...}'`, `--extra-vars=...` and `-ek=v`
    are understood; an `@file` argument names a file and stays.
    """
    is_secret = _Names(names)
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(_hide_extra_value(arg, is_secret, marker))
            hide_next = False
        elif arg in ("-e", "--extra-vars"):
            out.append(arg)
            hide_next = True
        elif arg.startswith("--extra-vars="):
            out.append(
                "--extra-vars=" + _hide_extra_value(arg.partition("=")[2], is_secret, marker)
            )
        elif arg.startswith("-e") and not arg.startswith("--") and len(arg) > 2:
            out.append("-e" + _hide_extra_value(arg[2:], is_secret, marker))
        else:
            out.append(arg)
    return out


def redact_text(text: str, secret_values: Iterable[str]) -> str:
    """`text` with every occurrence of each secret value (raw or JSON-escaped) replaced."""
    return Redactor(secret_values).text(text)


@dataclass
class RedactReport:
    """What `redact_tree` changed: files rewritten and how many replacements were made."""

    files: list[Path] = field(default_factory=list)
    replacements: int = 0


def redact_file(path: Path, secret_values: Iterable[str]) -> int:
    """Replace secret values in one file in place (streamed, tmp + rename); the count replaced.

    Works on bytes, so binary or undecodable files are handled without error; a secret inside
    a binary file is still replaced (a leak is worse than a damaged blob). A `.json` file is
    redacted value by value instead, so it stays valid JSON.
    """
    return Redactor(secret_values).count_file(str(path), _CHUNK)


def redact_tree(root: Path, secret_values: Iterable[str]) -> RedactReport:
    """Replace every secret value in every regular file under `root`, in place.

    Symbolic links are not followed (their targets are not ours to rewrite).
    """
    report = RedactReport()
    for path, count in Redactor(secret_values).tree(str(root), _CHUNK):
        report.files.append(Path(path))
        report.replacements += count
    return report


def cell_json_by_name(cell: Cell) -> dict[str, Any]:
    """A cell's JSON with the env values (the cell's and each node part's) and matrix values
    under a secret name hidden by name: a short secret is no value the by-value sweep would
    find. plan.json and `orch plan` alike."""
    data = cell.model_dump(mode="json")
    hidden = [data, *(data.get("nodes") or ())]  # every node's part has its own env
    for section, where in [("env", d) for d in hidden] + [("axes", data)]:
        if isinstance(where.get(section), dict):
            where[section] = {
                k: (REDACTED if is_secret_name(k, cell.secrets) else v)
                for k, v in where[section].items()
            }
    return data
