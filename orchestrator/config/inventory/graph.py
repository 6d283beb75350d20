"""The group/host graph every inventory format is read into, before variables are resolved.

Readers (YAML/JSON in inventory.py, INI in inventory_ini.py, `-i host1,host2,` lists) add groups,
hosts, links and variables here with the place each came from; inventory.py then resolves the
graph into an Inventory. Host ranges (`gpu[01:16]`, `node[a:c]`, `x[1:9:4]`) and `name:port`
host names mean the same in every format.
"""

from __future__ import annotations

import ipaddress
import re
import string
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.values import quotable
from orchestrator.errors import InputError, SourceLocation

# Characters that host patterns give a meaning to: a group name holding one could not be selected.
_BAD_GROUP_CHARS = re.compile(r"[\s,:!&~*?\[\]]")
_RANGE = re.compile(r"\[([^\]]*)\]")
# `name:port`, where the name may hold one range (`gpu[01:04]:2222`).
_NAME_AND_PORT = re.compile(r"([^:\[\]]+|[^:]*\[[^\]]*\][^:]*):(\d+)")
# Ansible's `[address]:port`, how an IPv6 address (or any name) takes a port: `[fe80::1]:2224`
_BRACKETED_AND_PORT = re.compile(r"\[([^\[\]:]*:[^\[\]]*|[^\[\]:]+)\]:(\d+)")


def expand_host_range(pattern: str) -> list[str]:
    """`gpu[01:03]` -> gpu01 gpu02 gpu03; `n[a:c]`; `x[1:9:4]`; several ranges multiply.

    Raises ValueError with a message a person can act on for a malformed range.
    """
    match = _RANGE.search(pattern)
    if match is None:
        if "[" in pattern or "]" in pattern:
            raise ValueError(f"unbalanced brackets in host name {pattern!r}")
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    bounds = match.group(1).split(":")
    if len(bounds) not in (2, 3):
        raise ValueError(f"host range [{match.group(1)}] must be [begin:end] or [begin:end:step]")
    begin, end = bounds[0] or "0", bounds[1]
    step_text = bounds[2] if len(bounds) == 3 else "1"
    if not end:
        raise ValueError(f"host range [{match.group(1)}] has no end")
    try:
        step = int(step_text)
    except ValueError:
        raise ValueError(f"host range step {step_text!r} is not an integer") from None
    if step < 1:
        raise ValueError(f"host range step must be 1 or more, got {step}")
    values: list[str]
    if begin in string.ascii_letters and end in string.ascii_letters and len(begin) == 1:
        letters = string.ascii_letters
        first, last = letters.index(begin), letters.index(end)
        if first > last:
            raise ValueError(f"host range [{match.group(1)}] runs backwards")
        values = list(letters[first : last + 1 : step])
    else:
        try:
            first, last = int(begin), int(end)
        except ValueError:
            raise ValueError(
                f"host range [{match.group(1)}] needs numbers (01:16) or single letters (a:f)"
            ) from None
        if first > last:
            raise ValueError(f"host range [{match.group(1)}] runs backwards")
        width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
        if width and len(end) != width:
            raise ValueError(
                f"host range [{match.group(1)}]: zero-padded begin and end need the same width"
            )
        values = [str(n).zfill(width) for n in range(first, last + 1, step)]
    out: list[str] = []
    for value in values:
        out.extend(expand_host_range(head + value + tail))
    return out


def bracketed_address(text: str) -> tuple[str, int] | None:
    """(address, port) of `[address]:port` (an IPv6 address with its port), else None; a
    bracketed range such as `[1:3]:22` is not an address."""
    match = _BRACKETED_AND_PORT.fullmatch(text)
    if match is None:
        return None
    address = match.group(1)
    if ":" in address:  # as Ansible: a plain IPv6 address (no %zone)
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            return None
        if "%" in address:
            return None
    return address, int(match.group(2))


def port_in_name(text: str) -> int | None:
    """The port of a `name:port` host entry, None when it has none."""
    match = _NAME_AND_PORT.fullmatch(text)
    return int(match.group(2)) if match else None


def host_names(pattern: str) -> tuple[list[str], int | None]:
    """The hosts a host entry stands for (ranges expanded) and the port it names, if any.

    Raises ValueError for a space or comma in the name or a malformed range.
    """
    bracketed = bracketed_address(pattern)
    if bracketed is not None:
        return [bracketed[0]], bracketed[1]
    port = port_in_name(pattern)
    text = pattern.rsplit(":", 1)[0] if port is not None else pattern
    if re.search(r"[\s,]", text):
        raise ValueError(f"host name {text!r} holds a space or comma")
    return expand_host_range(text), port


@dataclass
class VarLayer:
    """Variables with where each was set."""

    values: dict[str, Any] = field(default_factory=dict)
    where: dict[str, SourceLocation] = field(default_factory=dict)

    def set(self, name: str, value: Any, where: SourceLocation) -> None:
        """Set one variable, remembering where it was written."""
        self.values[name] = value
        self.where[name] = where

    def update(self, other: VarLayer) -> None:
        """Let every variable of `other` win over this layer's."""
        self.values.update(other.values)
        self.where.update(other.where)


@dataclass
class GroupDraft:
    """A group as read: direct hosts, child groups and its inventory-file vars."""

    name: str
    location: SourceLocation
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    child_locations: dict[str, SourceLocation] = field(default_factory=dict)
    vars: VarLayer = field(default_factory=VarLayer)
    priority: int = 1  # ansible_group_priority: orders groups of the same depth


@dataclass
class HostDraft:
    """A host as read, with its inventory-file vars."""

    name: str
    location: SourceLocation
    vars: VarLayer = field(default_factory=VarLayer)


class InventoryGraph:
    """Groups and hosts of every source, read one after another into one graph.

    As in Ansible, a group or host named in two files is one group or host; later vars win.
    """

    def __init__(self) -> None:
        self.groups: dict[str, GroupDraft] = {}
        self.hosts: dict[str, HostDraft] = {}

    def group(self, name: str, location: SourceLocation, key_path: str | None = None) -> GroupDraft:
        """The group `name`, declared at `location` when new; refused if patterns cannot name it."""
        if _BAD_GROUP_CHARS.search(name):
            raise InputError(
                f"{'group name ' + repr(name) if quotable(name) else 'this group name'} "
                "holds a character that host patterns use",
                location=location,
                key_path=key_path,
                hint="use letters, digits, '_' and '-' (not space , : ! & ~ * ? [ ])",
            )
        draft = self.groups.get(name)
        if draft is None:
            draft = self.groups[name] = GroupDraft(name, location)
        return draft

    def link(self, parent: str, child: str, location: SourceLocation) -> None:
        """Make `child` a child group of `parent` (both already declared)."""
        draft = self.groups[parent]
        if child not in draft.children:
            draft.children.append(child)
            draft.child_locations[child] = location

    def add_host(self, group: GroupDraft, name: str, location: SourceLocation) -> HostDraft:
        """Declare host `name` (once for the whole inventory) as a member of `group`."""
        host = self.hosts.get(name)
        if host is None:
            host = self.hosts[name] = HostDraft(name, location)
        if name not in group.hosts:
            group.hosts.append(name)
        return host

    def set_group_var(
        self, group: GroupDraft, name: str, value: Any, where: SourceLocation
    ) -> None:
        """A group's inventory-file variable; `ansible_group_priority` sets its priority instead.

        As in Ansible, the priority is no variable: it only orders groups of the same depth.
        """
        if name == "ansible_group_priority":
            try:
                group.priority = int(value)
            except (TypeError, ValueError):
                raise InputError(
                    f"ansible_group_priority of group {group.name!r} must be an integer, "
                    f"got {value!r}",
                    location=where,
                ) from None
            return
        group.vars.set(name, value, where)

    def check_cycles(self) -> None:
        """An InputError at the link that makes a group its own ancestor."""
        state: dict[str, int] = {}  # 1: on the current path, 2: done

        def visit(name: str, trail: list[str]) -> None:
            state[name] = 1
            for child in self.groups[name].children:
                if state.get(child) == 1:
                    start = trail.index(child) if child in trail else len(trail)
                    cycle = [*trail[start:], name, child]
                    raise InputError(
                        f"group {child!r} is its own ancestor: " + " -> ".join(cycle),
                        location=self.groups[name].child_locations.get(child),
                        hint=f"remove {child!r} from the children of {name!r}",
                    )
                if state.get(child) is None:
                    visit(child, [*trail, name])
            state[name] = 2

        for name in self.groups:
            if state.get(name) is None:
                visit(name, [])
