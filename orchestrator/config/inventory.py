"""Ansible inventories (YAML as written, or the JSON `ansible-inventory --list` prints) → Inventory.

Accepted as Ansible reads them: one or more files or directories of them (inventory_sources);
groups with `hosts`, `vars` and `children`; host ranges (`gpu[01:16]`, `node[a:c]`, `[1:10:2]`);
`group_vars/` and `host_vars/` beside each file or inside each directory; variable
precedence all < parent group < child group < host, then the group_vars/host_vars files in the
same order. Connection variables (`ansible_host`, `ansible_port`, ... or orch's plain `host`,
`port`, ...) become `Host` fields. Every problem is an InputError at the file, line and column.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.host import ConnectionKind, Group, Host, Inventory, localhost_inventory
from orchestrator.config.inventory_sources import (
    inventory_files,
    refuse_unreadable_format,
    vars_folder,
)
from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.config.values import describe, is_template, suggest
from orchestrator.config.yamlpos import YamlDocument, load_yaml
from orchestrator.errors import InputError, SourceLocation

_GROUP_KEYS = ("hosts", "vars", "children")
_VARS_SUFFIXES = ("", ".yml", ".yaml", ".json")
# Characters that host patterns give a meaning to: a group name holding one could not be selected.
_BAD_GROUP_CHARS = re.compile(r"[\s,:!&~*?\[\]]")
_RANGE = re.compile(r"\[([^\]]*)\]")

_CONNECTIONS: dict[str, ConnectionKind] = {
    "local": "local",
    "ssh": "ssh",
    "smart": "ssh",  # Ansible's default: ssh
    "paramiko": "ssh",
    "paramiko_ssh": "ssh",
}
_TRUE = {"true", "yes", "on", "1", "y"}
_FALSE = {"false", "no", "off", "0", "n"}


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


@dataclass
class _Layer:
    """Variables with where each was set."""

    values: dict[str, Any] = field(default_factory=dict)
    where: dict[str, SourceLocation] = field(default_factory=dict)

    def update(self, other: _Layer) -> None:
        self.values.update(other.values)
        self.where.update(other.where)


@dataclass
class _GroupDraft:
    name: str
    location: SourceLocation
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    child_locations: dict[str, SourceLocation] = field(default_factory=dict)
    vars: _Layer = field(default_factory=_Layer)
    file_vars: _Layer = field(default_factory=_Layer)  # from group_vars/


@dataclass
class _HostDraft:
    name: str
    location: SourceLocation
    vars: _Layer = field(default_factory=_Layer)
    file_vars: _Layer = field(default_factory=_Layer)  # from host_vars/


class _Reader:
    """Builds groups and hosts from parsed inventory files, read one after another into one graph.

    As in Ansible, a group or host named in two files is one group or host; later vars win.
    """

    def __init__(self) -> None:
        self.groups: dict[str, _GroupDraft] = {}
        self.hosts: dict[str, _HostDraft] = {}
        self.doc: YamlDocument | None = None

    def at(self, path: KeyPath, *, value: bool = True) -> SourceLocation:
        assert self.doc is not None, "read() sets the document first"
        return self.doc.locate(path, value=value)

    def fail(
        self, message: str, path: KeyPath, *, value: bool = True, hint: str | None = None
    ) -> InputError:
        return InputError(
            message, location=self.at(path, value=value), key_path=_dotted(path), hint=hint
        )

    def group(self, name: Any, path: KeyPath) -> _GroupDraft:
        if not isinstance(name, str) or not name:
            raise self.fail(
                f"a group name must be a string, got {describe(name)}", path, value=False
            )
        if _BAD_GROUP_CHARS.search(name):
            raise self.fail(
                f"group name {name!r} holds a character that host patterns use",
                path,
                value=False,
                hint="use letters, digits, '_' and '-' (not space , : ! & ~ * ? [ ])",
            )
        draft = self.groups.get(name)
        if draft is None:
            draft = self.groups[name] = _GroupDraft(name, self.at(path, value=False))
        return draft

    def read(self, doc: YamlDocument) -> None:
        self.doc = doc
        data = doc.data
        if not isinstance(data, dict):
            raise self.fail(
                f"an inventory is a mapping of groups (all: {{hosts: ...}}), got {describe(data)}",
                (),
            )
        self.group("all", ())
        meta = None
        for name, body in data.items():
            if name == "_meta":
                meta = body
                continue
            draft = self.group(name, (name,))
            if name != "all":
                self.link("all", name, (name,))
            self.body(draft, body, (name,))
        if meta is not None:
            self.meta(meta)

    def link(self, parent: str, child: str, path: KeyPath) -> None:
        draft = self.groups[parent]
        if child not in draft.children:
            draft.children.append(child)
            draft.child_locations[child] = self.at(path, value=False)

    def body(self, draft: _GroupDraft, body: Any, path: KeyPath) -> None:
        if body is None:
            return
        if isinstance(body, list):  # old script output: a group is a plain list of hosts
            self.host_list(draft, body, path)
            return
        if not isinstance(body, dict):
            raise self.fail(
                f"group {draft.name!r} must be a mapping of hosts, vars and children, "
                f"got {describe(body)}",
                path,
            )
        for key, value in body.items():
            where = (*path, key)
            if key == "hosts":
                self.hosts_of(draft, value, where)
            elif key == "vars":
                self.vars_into(draft.vars, value, where, f"vars of group {draft.name!r}")
            elif key == "children":
                self.children_of(draft, value, where)
            else:
                hint = suggest(str(key), _GROUP_KEYS)
                if hint is None and (value is None or isinstance(value, dict)):
                    hint = f"put a host {key!r} under 'hosts:', a child group under 'children:'"
                raise self.fail(
                    f"unknown key {key!r} in group {draft.name!r} "
                    "(a group has hosts, vars, children)",
                    where,
                    value=False,
                    hint=hint,
                )

    def hosts_of(self, draft: _GroupDraft, value: Any, path: KeyPath) -> None:
        if value is None:
            return
        if isinstance(value, list):
            self.host_list(draft, value, path)
            return
        if not isinstance(value, dict):
            raise self.fail(
                f"hosts must be a mapping of host names (name: vars, or name: with nothing), "
                f"got {describe(value)}",
                path,
            )
        seen: dict[str, str] = {}
        for pattern, host_vars in value.items():
            where = (*path, pattern)
            for name in self.names(pattern, where):
                if name in seen:
                    raise self.fail(
                        f"duplicate host {name!r} in group {draft.name!r}"
                        + (f" (also from {seen[name]!r})" if seen[name] != name else ""),
                        where,
                        value=False,
                        hint="a host is listed once per group; remove one or narrow the range",
                    )
                seen[name] = str(pattern)
                host = self.declare(name, where)
                if name not in draft.hosts:
                    draft.hosts.append(name)
                self.vars_into(host.vars, host_vars, where, f"vars of host {name!r}")
                port = _port_in_name(str(pattern))
                if port is not None:
                    host.vars.values.setdefault("ansible_port", port)
                    host.vars.where.setdefault("ansible_port", self.at(where, value=False))

    def host_list(self, draft: _GroupDraft, value: list[Any], path: KeyPath) -> None:
        seen: set[str] = set()
        for i, pattern in enumerate(value):
            where = (*path, i)
            for name in self.names(pattern, where):
                if name in seen:
                    raise self.fail(f"duplicate host {name!r} in group {draft.name!r}", where)
                seen.add(name)
                self.declare(name, where)
                if name not in draft.hosts:
                    draft.hosts.append(name)

    def names(self, pattern: Any, path: KeyPath) -> list[str]:
        if not isinstance(pattern, str | int) or isinstance(pattern, bool) or pattern == "":
            raise self.fail(
                f"a host name must be a string, got {describe(pattern)}", path, value=False
            )
        text = str(pattern)
        port = _port_in_name(text)
        if port is not None:
            text = text.rsplit(":", 1)[0]
        if re.search(r"[\s,]", text):
            raise self.fail(f"host name {text!r} holds a space or comma", path, value=False)
        try:
            return expand_host_range(text)
        except ValueError as exc:
            raise self.fail(str(exc), path, value=False) from None

    def declare(self, name: str, path: KeyPath) -> _HostDraft:
        host = self.hosts.get(name)
        if host is None:
            host = self.hosts[name] = _HostDraft(name, self.at(path, value=False))
        return host

    def children_of(self, draft: _GroupDraft, value: Any, path: KeyPath) -> None:
        if value is None:
            return
        if isinstance(value, list):  # the JSON form names children
            for i, child in enumerate(value):
                self.group(child, (*path, i))
                self.link(draft.name, child, (*path, i))
            return
        if not isinstance(value, dict):
            raise self.fail(
                f"children must be a mapping of group names, got {describe(value)}", path
            )
        for child, body in value.items():
            where = (*path, child)
            child_draft = self.group(child, where)
            self.link(draft.name, child, where)
            self.body(child_draft, body, where)

    def vars_into(self, layer: _Layer, value: Any, path: KeyPath, what: str) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise self.fail(f"{what} must be a mapping, got {describe(value)}", path)
        for name, item in value.items():
            if not isinstance(name, str):
                raise self.fail(
                    f"a variable name must be a string, got {describe(name)}",
                    (*path, name),
                    value=False,
                )
            layer.values[name] = item
            layer.where[name] = self.at((*path, name))

    def meta(self, meta: Any) -> None:
        if not isinstance(meta, dict):
            raise self.fail(
                f"_meta must be a mapping with hostvars, got {describe(meta)}", ("_meta",)
            )
        hostvars = meta.get("hostvars")
        if hostvars is None:
            return
        if not isinstance(hostvars, dict):
            raise self.fail(
                f"_meta.hostvars must map host names to vars, got {describe(hostvars)}",
                ("_meta", "hostvars"),
            )
        for name, values in hostvars.items():
            where = ("_meta", "hostvars", name)
            host = self.hosts.get(str(name))
            if host is None:
                continue  # Ansible ignores vars of hosts no group lists
            self.vars_into(host.vars, values, where, f"vars of host {name!r}")


def _dotted(path: KeyPath) -> str | None:
    return format_key_path(path) or None


def _port_in_name(text: str) -> int | None:
    match = re.fullmatch(r"([^:\[\]]+|[^:]*\[[^\]]*\][^:]*):(\d+)", text)
    return int(match.group(2)) if match else None


def _var_files(folder: Path, name: str) -> Iterator[Path]:
    """group_vars/<name>(.yml|.yaml|.json) and every such file under group_vars/<name>/."""
    for suffix in _VARS_SUFFIXES:
        candidate = folder / f"{name}{suffix}"
        if candidate.is_file():
            yield candidate
    directory = folder / name
    if directory.is_dir():
        for item in sorted(directory.rglob("*")):
            if item.is_file() and item.suffix in _VARS_SUFFIXES and not item.name.startswith("."):
                yield item


def _read_vars_file(path: Path) -> _Layer:
    doc = load_yaml(path, allow_empty=True, what="vars file")
    layer = _Layer()
    if doc.data is None:
        return layer
    if not isinstance(doc.data, dict):
        raise InputError(
            f"a vars file is a mapping of names to values, got {describe(doc.data)}",
            location=doc.locate((), value=True),
        )
    for name, value in doc.data.items():
        layer.values[str(name)] = value
        layer.where[str(name)] = doc.locate((name,), value=True)
    return layer


def _check_cycles(reader: _Reader) -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for child in reader.groups[name].children:
            if state.get(child) == 1:
                cycle = (
                    [*trail[trail.index(child) :], name, child] if child in trail else [name, child]
                )
                raise InputError(
                    f"group {child!r} is its own ancestor: " + " -> ".join(cycle),
                    location=reader.groups[name].child_locations.get(child),
                    hint=f"remove {child!r} from the children of {name!r}",
                )
            if state.get(child) is None:
                visit(child, [*trail, name])
        state[name] = 2

    for name in reader.groups:
        if state.get(name) is None:
            visit(name, [])


def _depths(groups: Mapping[str, _GroupDraft]) -> dict[str, int]:
    """Ansible's group depth: the longest chain of parents up to `all` (which is 0)."""
    depth: dict[str, int] = {"all": 0}
    # Groups are acyclic here; relax depths until stable (graphs are small).
    changed = True
    while changed:
        changed = False
        for name in list(groups):
            for child in groups[name].children:
                want = depth.get(name, 0) + 1
                if depth.get(child, -1) < want:
                    depth[child] = want
                    changed = True
    for name in groups:
        depth.setdefault(name, 1)
    return depth


def _priority(draft: _GroupDraft) -> int:
    value = draft.vars.values.get("ansible_group_priority", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def load_inventory(source: Path | Sequence[Path] | None) -> Inventory:
    """Read Ansible YAML or JSON inventories; None or no paths give the built-in `localhost`.

    Each source is a file or a directory of them (inventory_sources.inventory_files); several
    sources are one inventory, read in order, as Ansible reads repeated -i options. An INI
    inventory or an inventory script is an InputError saying how to convert it.
    """
    sources = [source] if isinstance(source, Path) else list(source or ())
    if not sources:
        return localhost_inventory()
    reader = _Reader()
    first: Path | None = None
    for item in sources:
        for path in inventory_files(item):
            refuse_unreadable_format(path)
            reader.read(load_yaml(path, what="inventory"))
            first = first or path
    assert first is not None  # inventory_files gives at least one file per source
    _check_cycles(reader)
    if not reader.hosts:
        raise InputError(
            "the inventory declares no hosts",
            location=SourceLocation(str(first), 1, 1),
            hint="add hosts under a group, e.g. all: {hosts: {gpu01: {ansible_host: 10.0.0.1}}}",
        )
    groups = reader.groups
    # Hosts listed only under `all` belong to `ungrouped`, as in Ansible.
    direct: dict[str, list[str]] = {h: [] for h in reader.hosts}
    for draft in groups.values():
        for host in draft.hosts:
            direct[host].append(draft.name)
    ungrouped = [h for h, gs in direct.items() if all(g == "all" for g in gs)]
    if "ungrouped" not in groups:
        groups["ungrouped"] = _GroupDraft("ungrouped", SourceLocation(str(first), 1, 1))
    groups["ungrouped"].hosts.extend(h for h in ungrouped if h not in groups["ungrouped"].hosts)
    if "ungrouped" not in groups["all"].children:
        groups["all"].children.append("ungrouped")
    groups["all"].hosts = []  # every host is reached through a child group
    # A top-level group that is also some group's child hangs below that group only, as in Ansible.
    nested = {c for g, d in groups.items() if g != "all" for c in d.children}
    groups["all"].children = [c for c in groups["all"].children if c not in nested]
    for host in ungrouped:
        direct[host] = ["ungrouped"]

    # Each source's group_vars/ and host_vars/, in source order: a later source's files win.
    for folder in dict.fromkeys(vars_folder(item) for item in sources):
        for name, draft in groups.items():
            for file in _var_files(folder / "group_vars", name):
                draft.file_vars.update(_read_vars_file(file))
        for name, hdraft in reader.hosts.items():
            for file in _var_files(folder / "host_vars", name):
                hdraft.file_vars.update(_read_vars_file(file))

    parents: dict[str, list[str]] = {g: [] for g in groups}
    for draft in groups.values():
        for child in draft.children:
            parents[child].append(draft.name)
    depth = _depths(groups)

    def ancestors(names: list[str]) -> set[str]:
        out: set[str] = set()
        stack = list(names)
        while stack:
            g = stack.pop()
            if g not in out:
                out.add(g)
                stack.extend(parents[g])
        return out

    hosts: dict[str, Host] = {}
    for name, hdraft in reader.hosts.items():
        member_of = ancestors(direct[name]) - {"all"}
        ordered = sorted(member_of, key=lambda g: (depth[g], _priority(groups[g]), g))
        merged = _Layer()
        merged.update(groups["all"].vars)
        for g in ordered:
            merged.update(groups[g].vars)
        merged.update(groups["all"].file_vars)
        for g in ordered:
            merged.update(groups[g].file_vars)
        merged.update(hdraft.vars)
        merged.update(hdraft.file_vars)
        hosts[name] = _host(name, hdraft.location, merged, tuple(sorted(member_of)))

    return Inventory(
        hosts=hosts,
        groups={
            name: Group(
                name=name,
                hosts=tuple(d.hosts),
                children=tuple(d.children),
                vars={**d.vars.values, **d.file_vars.values},
            )
            for name, d in groups.items()
        },
        source=", ".join(str(item) for item in sources),
    )


def _host(name: str, location: SourceLocation, merged: _Layer, groups: tuple[str, ...]) -> Host:
    values = merged.values

    def pick(*names: str) -> tuple[str, Any] | None:
        for var in names:
            if var in values and values[var] is not None:
                value = values[var]
                if is_template(value):
                    raise InputError(
                        f"host {name!r}: {var} is a template; connection variables must be "
                        "plain values",
                        location=merged.where.get(var, location),
                        key_path=var,
                    )
                return var, value
        return None

    def bad(var: str, message: str, hint: str | None = None) -> InputError:
        return InputError(
            f"host {name!r}: {message}",
            location=merged.where.get(var, location),
            key_path=var,
            hint=hint,
        )

    def text(*names: str) -> str | None:
        found = pick(*names)
        if found is None:
            return None
        var, value = found
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise bad(var, f"expected a string, got {describe(value)}")
        return str(value)

    kind: ConnectionKind = "ssh"
    found = pick("ansible_connection", "connection")
    if found is not None:
        var, value = found
        mapped = _CONNECTIONS.get(str(value)) if isinstance(value, str) else None
        if mapped is None:
            raise bad(
                var,
                f"unknown connection {value!r} (orch connects with local or ssh)",
                suggest(str(value), _CONNECTIONS),
            )
        kind = mapped

    port: int | None = None
    found = pick("ansible_port", "port", "ansible_ssh_port")
    if found is not None:
        var, value = found
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
            raise bad(var, f"expected a port number (1-65535), got {describe(value)}")
        port = value

    checking = True
    found = pick("ansible_host_key_checking", "host_key_checking")
    if found is not None:
        var, value = found
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            value = value.strip().lower() in _TRUE
        if not isinstance(value, bool):
            raise bad(var, f"expected true or false, got {describe(value)}")
        checking = value

    python = text("ansible_python_interpreter", "python") or "python3"
    if python.startswith("auto"):  # Ansible's interpreter discovery: the host's python3
        python = "python3"

    return Host(
        name=name,
        vars=dict(values),
        groups=groups,
        connection=kind,
        address=text("ansible_host", "host", "ansible_ssh_host"),
        port=port,
        user=text("ansible_user", "user", "ansible_ssh_user"),
        key_file=text("ansible_ssh_private_key_file", "ansible_private_key_file", "key"),
        python=python,
        host_key_checking=checking,
        known_hosts=text("orch_known_hosts"),
        workdir=text("orch_workdir") or ".orch",
        location=location,
    )
