"""Ansible's INI inventory format, read as ansible-core reads it (without depending on it).

`read_ini`, for inventory/load.py, fills graph.py's graph; its choices: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import ast
import difflib
import re
import shlex
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.config.inventory.graph import (
    GroupDraft,
    InventoryGraph,
    bracketed_address,
    host_names,
)
from orchestrator.config.values import quotable, shown
from orchestrator.errors import InputError, SourceLocation

# ansible-core's section and group-name syntax: no space, ':' or ']' in a name; `# comment` after.
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
_KINDS = ("hosts", "vars", "children")
_SECTION_HINT = (
    "a section header is [group], [group:vars] or [group:children], with no spaces inside the "
    "brackets; a comment after it starts with '#'"
)


def _did_you_mean(word: str, known: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def _bracketed_host(line: str) -> bool:
    """Whether a line starting with '[' is a host `[address]:port`, not a section header."""
    return bracketed_address(line.split(None, 1)[0]) is not None


def ini_value(text: str) -> Any:
    """A value as ansible-core reads it from an INI inventory: a Python literal, else the text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text
    return _plain(value)


def _plain(value: Any) -> Any:
    """Literal values YAML could also hold: tuples and sets become lists, the rest text."""
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, set | frozenset):
        return [_plain(item) for item in sorted(value, key=repr)]  # a stable order for cell ids
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if value is Ellipsis or isinstance(value, complex):
        return "..." if value is Ellipsis else str(value)
    return value


class _IniReader:
    """One INI file read into the inventory graph, line by line, as ansible-core's ini plugin."""

    def __init__(self, graph: InventoryGraph, path: Path) -> None:
        self.graph = graph
        self.file = str(path)
        # Groups a [g:vars] section or a `:children` line may name without declaring here.
        self.declared = {*graph.groups, "all", "ungrouped"}
        self.uses: dict[str, tuple[SourceLocation, str]] = {}  # first use needing a declaration

    def at(self, number: int, raw: str, needle: str | None = None) -> SourceLocation:
        """Line `number`, at `needle` in it when found, else at the line's first character."""
        col = raw.find(needle) if needle else -1
        if col < 0:
            col = len(raw) - len(raw.lstrip())
        return SourceLocation(self.file, number, col + 1)

    def read(self, text: str) -> None:
        """Read every line; then refuse a group that was used but never declared."""
        self.graph.group("all", SourceLocation(self.file, 1, 1))
        group = self.graph.group("ungrouped", SourceLocation(self.file, 1, 1))
        kind = "hosts"
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and not (kind == "hosts" and _bracketed_host(line)):
                group, kind = self.section(line, self.at(number, raw))
            elif kind == "hosts":
                self.host_line(group, line, number, raw)
            elif kind == "vars":
                self.var_line(group, line, number, raw)
            else:
                self.child_line(group, line, self.at(number, raw))
        for name, (where, message) in self.uses.items():
            if name not in self.declared:
                hint = f"declare it with a [{name}] section (it may hold no hosts)"
                close = _did_you_mean(name, sorted(self.declared - {"all", "ungrouped"}))
                raise InputError(
                    message, location=where, hint=f"{hint}, or {close}" if close else hint
                )

    def section(self, line: str, at: SourceLocation) -> tuple[GroupDraft, str]:
        match = _SECTION.match(line)
        if match is None:
            raise InputError(
                f"invalid section header {shown(line, '(not shown)')}",
                location=at,
                hint=_SECTION_HINT,
            )
        name, kind = match.group(1), match.group(2) or "hosts"
        if kind not in _KINDS:
            raise InputError(
                f"section [{name}:{kind}] has unknown type {kind!r} "
                "(a section is [group], [group:vars] or [group:children])",
                location=at,
                hint=_did_you_mean(kind, _KINDS),
            )
        group = self.graph.group(name, SourceLocation(self.file, at.line, (at.col or 1) + 1))
        if name != "all":
            self.graph.link("all", name, at)  # dropped again when it is some group's child
        if kind == "vars":
            self.uses.setdefault(
                name,
                (at, f"section [{name}:vars] is for group {name!r}, which is never declared"),
            )
        else:
            self.declared.add(name)
        return group, kind

    def host_line(self, group: GroupDraft, line: str, number: int, raw: str) -> None:
        at = self.at(number, raw)
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as exc:
            raise InputError(
                f"cannot read host line {shown(line, '(not shown)')}: {str(exc).lower()}",
                location=at,
                hint="close the quote, or quote a value that holds a quote with the other kind",
            ) from None
        if not tokens:
            return
        entry = tokens[0]
        if entry == "---":
            raise InputError(
                "'---' starts a YAML document, not an INI host line",
                location=at,
                hint="name a YAML inventory .yml",
            )
        if entry.endswith(":"):
            raise InputError(
                f"host {shown(entry, '(not shown)')} ends in ':' with no port after it",
                location=at,
                hint="write name:port, or the name alone",
            )
        try:
            names, port = host_names(entry)
        except ValueError as exc:
            message = str(exc) if quotable(entry) else "this line does not start with a host name"
            raise InputError(message, location=at) from None
        variables: list[tuple[str, Any, SourceLocation]] = []
        for token in tokens[1:]:
            key, equals, value = token.partition("=")
            where = self.at(number, raw, token if not equals else f"{key}=")
            if not equals or not key:
                if not quotable(entry):  # a line of some other file: never echoed
                    raise InputError(
                        "this line is not an inventory host line (a host, then key=value pairs)",
                        location=at,
                    )
                raise InputError(
                    f"expected key=value after host {entry!r}, got {shown(token, 'a word')}",
                    location=where,
                    hint='quote a value that holds spaces: key="two words"',
                )
            variables.append((key, ini_value(value), where))
        for name in names:
            host = self.graph.add_host(group, name, at)
            if port is not None:
                host.vars.set("ansible_port", port, at)
            for key, value, where in variables:
                host.vars.set(key, value, where)

    def var_line(self, group: GroupDraft, line: str, number: int, raw: str) -> None:
        key, equals, value = (part.strip() for part in line.partition("="))
        at = self.at(number, raw)
        if not equals or not key:
            raise InputError(
                f"expected key=value in [{group.name}:vars], got {shown(line, 'another line')}",
                location=at,
                hint="one variable per line, e.g. ansible_user=bench",
            )
        self.graph.set_group_var(group, key, ini_value(value), at)

    def child_line(self, group: GroupDraft, line: str, at: SourceLocation) -> None:
        match = _GROUP_NAME.match(line)
        if match is None:
            raise InputError(
                f"expected one group name in [{group.name}:children], "
                f"got {shown(line, 'another line')}",
                location=at,
                hint="one child group per line; hosts go in a [group] section",
            )
        child = match.group(1)
        self.graph.group(child, at)
        self.graph.link(group.name, child, at)
        self.uses.setdefault(
            child,
            (
                at,
                f"[{group.name}:children] names group {child!r}, "
                f"which no [{child}] or [{child}:children] section declares",
            ),
        )


def read_ini(graph: InventoryGraph, path: Path, text: str) -> None:
    """Read one INI inventory (the text of `path`) into `graph`; errors are located InputErrors."""
    _IniReader(graph, path).read(text)
