"""YAML loading that keeps the file, line and column of every key and value.

Errors a person must fix point at the exact spot they wrote, so loading returns plain data plus
two maps from key paths (`("server", "args", 0, "tp-size")`) to 1-based source locations: one
for where a key (or list item) starts, one for where its value starts.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.config.values import quotable, shown
from orchestrator.errors import InputError, SourceLocation

# libyaml is several times faster; the pure-Python loader gives the same nodes and marks.
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_TAG = "tag:yaml.org,2002:bool"

Positions = dict[KeyPath, SourceLocation]

# Values that aliases may add by repeating what their anchors hold: a billion-laughs file of 1 KB
# would otherwise build 10**9 values. Text without aliases is bounded by the file size instead.
MAX_ALIAS_EXPANSION = 200_000

# What `read_text` reads of a user's file at most: far above any playbook, inventory or vars file.
MAX_FILE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class YamlDocument:
    """One parsed file: plain data, where each key starts, and where each value starts."""

    path: Path
    data: Any
    positions: Positions = field(default_factory=dict)  # key (or list item) locations
    value_positions: Positions = field(default_factory=dict)  # value locations
    # Values YAML 1.1 read as booleans from yes/no/on/off: rarely meant as such (`spec: off`).
    word_booleans: frozenset[KeyPath] = frozenset()

    def locate(self, path: KeyPath, *, value: bool = False) -> SourceLocation:
        """The location of `path` (its value when `value`), else of its nearest known ancestor."""
        return locate(
            self.positions,
            path,
            file=str(self.path),
            value_positions=(self.value_positions if value else None),
        )


def locate(
    positions: Mapping[KeyPath, SourceLocation],
    path: KeyPath,
    *,
    file: str,
    value_positions: Mapping[KeyPath, SourceLocation] | None = None,
) -> SourceLocation:
    """The best known location of `path`: its value, its key, or the nearest ancestor's."""
    p = tuple(path)
    if value_positions is not None and p in value_positions:
        return value_positions[p]
    while p:
        loc = positions.get(p)
        if loc is not None:
            return loc
        p = p[:-1]
    return positions.get((), SourceLocation(file, 1, 1))


def _mark_location(file: str, mark: Any) -> SourceLocation:
    return SourceLocation(file, mark.line + 1, mark.column + 1)


_YAML_HINTS = {
    "cannot start any token": "indent with spaces, not tabs",
    "tab character": "indent with spaces, not tabs",
    "mapping values are not allowed": "check the indentation, or quote a value holding ': '",
    "expected <block end>": "check the indentation of this line against the lines above",
    "did not find expected key": "check the indentation of this line against the lines above",
    "did not find expected '-'": "check the indentation of this list item",
    "could not find expected ':'": "a key needs ': ' after it, or a string needs quotes",
    "expected ',' or ']'": "a ',' is missing between items, or the list is not closed with ']'",
    "expected ',' or '}'": "a ',' is missing between items, or the mapping is not closed with '}'",
    "found undefined alias": "define the anchor (&name) before using it (*name)",
    "expected a single document": "remove the '---' that starts a second document",
}


def _yaml_error(file: str, exc: yaml.YAMLError) -> InputError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    location = _mark_location(file, mark) if mark is not None else SourceLocation(file)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    message = f"invalid YAML: {problem}"
    if context:
        context_mark = getattr(exc, "context_mark", None)
        line = getattr(context_mark, "line", None)
        if line is not None and mark is not None and line != mark.line and context[:5] == "while":
            context += f" started at line {line + 1}"
        message += f" ({context})"
    hint = next((h for needle, h in _YAML_HINTS.items() if needle in message), None)
    return InputError(message, location=location, hint=hint)


class _Builder:
    """Turns a composed node tree into plain data, recording positions as it goes."""

    def __init__(self, file: str, loader: yaml.SafeLoader) -> None:
        self.file = file
        self.loader = loader
        self.positions: Positions = {}
        self.value_positions: Positions = {}
        self.word_booleans: set[KeyPath] = set()
        self._active: set[int] = set()

    def build(self, node: Node, path: KeyPath) -> Any:
        self.value_positions[path] = _mark_location(self.file, node.start_mark)
        if isinstance(node, ScalarNode):
            if node.tag == _BOOL_TAG and node.value.lower() not in ("true", "false"):
                self.word_booleans.add(path)
            return self.loader.construct_object(node, deep=True)
        if id(node) in self._active:
            raise InputError(
                "an alias refers to the mapping or list that contains it",
                location=_mark_location(self.file, node.start_mark),
                key_path=format_key_path(path) or None,
            )
        self._active.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                out: list[Any] = []
                for i, item in enumerate(node.value):
                    self.positions[(*path, i)] = _mark_location(self.file, item.start_mark)
                    out.append(self.build(item, (*path, i)))
                return out
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
        finally:
            self._active.discard(id(node))
        raise InputError(  # pragma: no cover - the composer makes only the three node kinds
            f"unsupported YAML node {type(node).__name__}",
            location=_mark_location(self.file, node.start_mark),
        )

    def _key(self, key_node: Node, path: KeyPath) -> Any:
        where = _mark_location(self.file, key_node.start_mark)
        if not isinstance(key_node, ScalarNode):
            raise InputError(
                "a mapping key must be a plain value, not a list or mapping",
                location=where,
                key_path=format_key_path(path) or None,
            )
        key = self.loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool) and key is not None:
            key = str(key)  # dates and the like: keep them usable as names
        return key

    def _mapping(self, node: MappingNode, path: KeyPath) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        merged_keys: Positions = {}
        seen: dict[Any, SourceLocation] = {}
        # `<<:` sources first, so that explicit keys overwrite their positions wherever they sit.
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                self._merge_into(merged, merged_keys, value_node, path)
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self._key(key_node, path)
            where = _mark_location(self.file, key_node.start_mark)
            if key in seen:
                first = seen[key]
                named = f"key {shown(key)}" if quotable(key) else "key"  # not a file's line
                raise InputError(
                    f"duplicate {named} (first defined at line {first.line})",
                    location=where,
                    key_path=format_key_path((*path, key)),
                    hint="remove one of them; YAML would silently keep only the last",
                )
            seen[key] = where
            self.positions[(*path, key)] = where
            out[key] = self.build(value_node, (*path, key))
        for key, value in merged.items():
            if key not in out:  # explicit keys win over `<<:` merged ones, as YAML says
                out[key] = value
                self.positions.setdefault((*path, key), merged_keys[(*path, key)])
        return out

    def _merge_into(
        self, merged: dict[Any, Any], merged_keys: Positions, node: Node, path: KeyPath
    ) -> None:
        sources = node.value if isinstance(node, SequenceNode) else [node]
        for source in sources:
            if not isinstance(source, MappingNode):
                raise InputError(
                    "'<<' merges only mappings",
                    location=_mark_location(self.file, source.start_mark),
                    key_path=format_key_path(path) or None,
                )
            data = self._mapping(source, path)
            for key, value in data.items():
                if key not in merged:  # the first source wins, as YAML says
                    merged[key] = value
                    merged_keys[(*path, key)] = self.positions[(*path, key)]


def _alias_over_budget(root: Node) -> int:
    """The alias (0-based, in document order) whose expansion takes the values aliases add to
    `root` past MAX_ALIAS_EXPANSION; -1 if none. Each node is walked once, aliases not expanded."""
    sizes: dict[int, int] = {}  # the built size of each node walked, aliases expanded
    active: set[int] = set()
    added = 0
    aliases = 0
    over = -1

    def walk(node: Node) -> int:
        nonlocal added, aliases, over
        known = sizes.get(id(node))
        if known is not None or id(node) in active:  # an alias (a cycle is left to _Builder)
            if over < 0:
                added += known or 1
                if added > MAX_ALIAS_EXPANSION:
                    over = aliases
            aliases += 1
            return known or 1
        active.add(id(node))
        size = 1
        if isinstance(node, SequenceNode):
            for item in node.value:
                size += walk(item)
        elif isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                size += walk(key_node) + walk(value_node)
        active.discard(id(node))
        sizes[id(node)] = size
        return size

    walk(root)
    return over


def _alias_bomb(text: str, file: str, index: int) -> InputError:
    """The error for the `index`-th alias of `text`, where expansion went over the budget."""
    seen = 0
    where = SourceLocation(file)
    name = ""
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            if seen == index:
                where = _mark_location(file, event.start_mark)
                name = f" *{event.anchor}"
                break
            seen += 1
    return InputError(
        f"YAML alias{name} expands the document past {MAX_ALIAS_EXPANSION:,} values: refused",
        location=where,
        hint="each alias repeats what its anchor holds, and nested aliases multiply",
    )


def parse_yaml(text: str, file: str, *, allow_empty: bool = False) -> YamlDocument:
    """Parse one YAML document from `text`; see `load_yaml` for the result and errors."""
    return _parse(text, Path(file), allow_empty=allow_empty)


def _parse(text: str, path: Path, *, allow_empty: bool) -> YamlDocument:
    file = str(path)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            if allow_empty:
                return YamlDocument(path, None, {(): SourceLocation(file, 1, 1)})
            raise InputError(
                "the file is empty",
                location=SourceLocation(file, 1, 1),
                hint="it needs at least one key",
            )
        over = _alias_over_budget(node)
        if over >= 0:
            raise _alias_bomb(text, file, over)
        builder = _Builder(file, loader)
        data = builder.build(node, ())
    except yaml.YAMLError as exc:
        raise _yaml_error(file, exc) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # A constructor rejected a scalar (e.g. an impossible date): name it, keep the position.
        raise InputError(f"invalid YAML value: {exc}", location=SourceLocation(file)) from None
    finally:
        loader.dispose()
    builder.positions[()] = SourceLocation(file, 1, 1)
    return YamlDocument(
        path, data, builder.positions, builder.value_positions, frozenset(builder.word_booleans)
    )


def read_text(path: Path, *, what: str = "file", limit: int = MAX_FILE_BYTES) -> str:
    """The text of a user's file, with read problems as InputError.

    Only regular files are read (a FIFO or /dev/zero would block or never end), and at most
    `limit` bytes: a bigger file is refused rather than read whole.
    """
    where = SourceLocation(str(path))
    try:
        # Non-blocking, so that opening a FIFO nobody writes to returns (and is refused below).
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise InputError(f"{what} is a directory, not a file: {path}", location=where)
            if not stat.S_ISREG(mode):
                raise InputError(
                    f"{what} is not a regular file (a device, FIFO or socket): {path}",
                    location=where,
                )
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{what} not found: {path}", location=where) from None
    except IsADirectoryError:
        raise InputError(f"{what} is a directory, not a file: {path}", location=where) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", location=where) from None
    if len(data) > limit:
        raise InputError(
            f"{what} is larger than {_size(limit)}: {path}",
            location=where,
            hint="is it the file you meant?",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text (byte {exc.start})", location=where) from None


def _size(count: int) -> str:
    return f"{count // (1024 * 1024)} MiB" if count >= 1024 * 1024 else f"{count} bytes"


def load_yaml(path: Path, *, allow_empty: bool = False, what: str = "file") -> YamlDocument:
    """Read and parse one YAML (or JSON) file, keeping every key's and value's position.

    Duplicate keys, broken YAML, several documents and (unless `allow_empty`) an empty file are
    InputErrors located in the file. A `.json` file that YAML cannot read (JSON allows tabs
    where YAML does not) falls back to the JSON parser, with positions for the root only.
    """
    text = read_text(path, what=what)
    if path.suffix.lower() == ".json":
        try:
            return _parse(text, path, allow_empty=allow_empty)
        except InputError as yaml_problem:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"invalid JSON: {exc.msg}",
                    location=SourceLocation(str(path), exc.lineno, exc.colno),
                ) from None
            if data is None and not allow_empty:
                raise yaml_problem from None
            return YamlDocument(path, data, {(): SourceLocation(str(path), 1, 1)})
    return _parse(text, path, allow_empty=allow_empty)
