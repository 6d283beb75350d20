"""Ansible inventories (YAML, INI, the JSON of `ansible-inventory --list`) → Inventory.

`load_inventory`, for app/plan.py, the CLI and audit; variable precedence: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.config.host import Group, Host, Inventory, localhost_inventory
from orchestrator.config.inventory.connection import host_from_vars
from orchestrator.config.inventory.graph import (
    GroupDraft,
    InventoryGraph,
    VarLayer,
    expand_host_range,
    host_names,
)
from orchestrator.config.inventory.ini import read_ini
from orchestrator.config.inventory.sources import (
    host_list_entries,
    inventory_files,
    inventory_format,
    is_host_list,
    sources_from_environment,
    vars_folder,
)
from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.config.values import describe, suggest
from orchestrator.config.yamlpos import YamlDocument, load_yaml, read_text
from orchestrator.errors import InputError, SourceLocation

__all__ = ["expand_host_range", "load_inventory"]

_GROUP_KEYS = ("hosts", "vars", "children")
_VARS_SUFFIXES = ("", ".yml", ".yaml", ".json")


class _YamlReader:
    """One YAML or JSON inventory document read into the inventory graph."""

    def __init__(self, graph: InventoryGraph, doc: YamlDocument) -> None:
        self.graph = graph
        self.doc = doc

    def at(self, path: KeyPath, *, value: bool = True) -> SourceLocation:
        return self.doc.locate(path, value=value)

    def fail(
        self, message: str, path: KeyPath, *, value: bool = True, hint: str | None = None
    ) -> InputError:
        return InputError(
            message, location=self.at(path, value=value), key_path=_dotted(path), hint=hint
        )

    def group(self, name: Any, path: KeyPath) -> GroupDraft:
        if not isinstance(name, str) or not name:
            raise self.fail(
                f"a group name must be a string, got {describe(name)}", path, value=False
            )
        return self.graph.group(name, self.at(path, value=False), _dotted(path))

    def read(self) -> None:
        data = self.doc.data
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
                self.graph.link("all", name, self.at((name,), value=False))
            self.body(draft, body, (name,))
        if meta is not None:
            self.meta(meta)

    def body(self, draft: GroupDraft, body: Any, path: KeyPath) -> None:
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
                for name, item, at in self.variables(value, where, f"vars of group {draft.name!r}"):
                    self.graph.set_group_var(draft, name, item, at)
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

    def hosts_of(self, draft: GroupDraft, value: Any, path: KeyPath) -> None:
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
            names, port = self.names(pattern, where)
            for name in names:
                if name in seen:
                    raise self.fail(
                        f"duplicate host {name!r} in group {draft.name!r}"
                        + (f" (also from {seen[name]!r})" if seen[name] != name else ""),
                        where,
                        value=False,
                        hint="a host is listed once per group; remove one or narrow the range",
                    )
                seen[name] = str(pattern)
                host = self.graph.add_host(draft, name, self.at(where, value=False))
                for var, item, at in self.variables(host_vars, where, f"vars of host {name!r}"):
                    host.vars.set(var, item, at)
                if port is not None and "ansible_port" not in host.vars.values:
                    host.vars.set("ansible_port", port, self.at(where, value=False))

    def host_list(self, draft: GroupDraft, value: list[Any], path: KeyPath) -> None:
        seen: set[str] = set()
        for i, pattern in enumerate(value):
            where = (*path, i)
            for name in self.names(pattern, where)[0]:
                if name in seen:
                    raise self.fail(f"duplicate host {name!r} in group {draft.name!r}", where)
                seen.add(name)
                self.graph.add_host(draft, name, self.at(where, value=False))

    def names(self, pattern: Any, path: KeyPath) -> tuple[list[str], int | None]:
        if not isinstance(pattern, str | int) or isinstance(pattern, bool) or pattern == "":
            raise self.fail(
                f"a host name must be a string, got {describe(pattern)}", path, value=False
            )
        try:
            return host_names(str(pattern))
        except ValueError as exc:
            raise self.fail(str(exc), path, value=False) from None

    def children_of(self, draft: GroupDraft, value: Any, path: KeyPath) -> None:
        if value is None:
            return
        if isinstance(value, list):  # the JSON form names children
            for i, child in enumerate(value):
                self.group(child, (*path, i))
                self.graph.link(draft.name, child, self.at((*path, i), value=False))
            return
        if not isinstance(value, dict):
            raise self.fail(
                f"children must be a mapping of group names, got {describe(value)}", path
            )
        for child, body in value.items():
            where = (*path, child)
            child_draft = self.group(child, where)
            self.graph.link(draft.name, child, self.at(where, value=False))
            self.body(child_draft, body, where)

    def variables(
        self, value: Any, path: KeyPath, what: str
    ) -> Iterator[tuple[str, Any, SourceLocation]]:
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
            yield name, item, self.at((*path, name))

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
            host = self.graph.hosts.get(str(name))
            if host is None:
                continue  # Ansible ignores vars of hosts no group lists
            for var, item, at in self.variables(values, where, f"vars of host {name!r}"):
                host.vars.set(var, item, at)


def _dotted(path: KeyPath) -> str | None:
    return format_key_path(path) or None


def _read_host_list(graph: InventoryGraph, source: Path) -> None:
    """`-i gpu01,gpu02:2222,`: hosts of `ungrouped` with no vars but a port, as Ansible's."""
    where = SourceLocation(f"-i {source}")
    ungrouped = graph.group("ungrouped", where)
    for name, port in host_list_entries(source):
        host = graph.add_host(ungrouped, name, where)
        if port is not None:
            host.vars.set("ansible_port", port, where)


class _VarsFiles:
    """group_vars/<name> and host_vars/<name> files of some folders, each file read once."""

    def __init__(self) -> None:
        self.cache: dict[tuple[Path, str, str], VarLayer] = {}

    def layer(self, folder: Path, kind: str, name: str) -> VarLayer:
        key = (folder, kind, name)
        if key not in self.cache:
            layer = VarLayer()
            for file in _var_files(folder / kind, name):
                layer.update(_read_vars_file(file))
            self.cache[key] = layer
        return self.cache[key]


def _var_files(folder: Path, name: str) -> Iterator[Path]:
    """The first of group_vars/<name>/ (every vars file under it), <name>, <name>.yml,
    <name>.yaml, <name>.json: as Ansible, the others beside it are not read."""
    for suffix in _VARS_SUFFIXES:
        candidate = folder / f"{name}{suffix}"
        if candidate.is_dir() and not suffix:
            for item in sorted(candidate.rglob("*")):
                if (
                    item.is_file()
                    and item.suffix in _VARS_SUFFIXES
                    and not item.name.startswith(".")
                ):
                    yield item
            return
        if candidate.is_file():
            yield candidate
            return


def _read_vars_file(path: Path) -> VarLayer:
    doc = load_yaml(path, allow_empty=True, what="vars file")
    layer = VarLayer()
    if doc.data is None:
        return layer
    if not isinstance(doc.data, dict):
        raise InputError(
            f"a vars file is a mapping of names to values, got {describe(doc.data)}",
            location=doc.locate((), value=True),
        )
    for name, value in doc.data.items():
        layer.set(str(name), value, doc.locate((name,), value=True))
    return layer


def _depths(groups: Mapping[str, GroupDraft]) -> dict[str, int]:
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


def load_inventory(
    source: Path | Sequence[Path] | None,
    *,
    playbook_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Inventory:
    """Read Ansible inventories (YAML, JSON, INI, host lists) into one Inventory.

    Each source is a file, a directory of them (inventory_sources.inventory_files) or a host list
    `a,b,`; several sources are one inventory, read in order, as Ansible reads repeated -i
    options. With no source, ANSIBLE_INVENTORY in `environ` (default: os.environ) names them,
    else the implicit `localhost` is the inventory. `playbook_dir` adds the group_vars/ and
    host_vars/ beside the playbook, above those beside the inventory (docs/ARCHITECTURE.md,
    Inventories).
    """
    sources = [source] if isinstance(source, Path) else list(source or ())
    if not sources:
        sources = sources_from_environment(os.environ if environ is None else environ)
    if not sources:
        return _implicit_localhost(playbook_dir)
    graph = InventoryGraph()
    folders: list[Path] = []  # where each source's group_vars/ and host_vars/ live
    first: SourceLocation | None = None
    for item in sources:
        if is_host_list(item):
            _read_host_list(graph, item)
            first = first or SourceLocation(f"-i {item}")
            continue
        if not item.exists():
            raise InputError(
                f"inventory not found: {item}",
                location=SourceLocation(str(item)),
                hint=f"a list of hosts ends with a comma: -i {item},",
            )
        folders.append(vars_folder(item))
        for path in inventory_files(item):
            text = read_text(path, what="inventory")
            if inventory_format(path, text) == "ini":
                read_ini(graph, path, text)
            else:
                _YamlReader(graph, load_yaml(path, what="inventory")).read()
            first = first or SourceLocation(str(path), 1, 1)
    assert first is not None  # every source gave a file or a host list
    graph.check_cycles()
    if not graph.hosts:
        raise InputError(
            "the inventory declares no hosts",
            location=first,
            hint="add hosts under a group, e.g. all: {hosts: {gpu01: {ansible_host: 10.0.0.1}}}",
        )
    return _resolve(graph, folders, playbook_dir, first, ", ".join(str(s) for s in sources))


def _implicit_localhost(playbook_dir: Path | None) -> Inventory:
    """Ansible's implicit localhost: no group, but group_vars/all and host_vars/localhost apply."""
    inventory = localhost_inventory()
    if playbook_dir is None:
        return inventory
    files = _VarsFiles()
    merged = VarLayer()
    merged.update(files.layer(playbook_dir, "group_vars", "all"))
    merged.update(files.layer(playbook_dir, "host_vars", "localhost"))
    if not merged.values:
        return inventory
    where = SourceLocation(str(playbook_dir))
    host = host_from_vars("localhost", where, merged, ("ungrouped",), connection="local")
    return dataclasses.replace(
        inventory, hosts={"localhost": dataclasses.replace(host, location=None)}
    )


def _reconcile(graph: InventoryGraph, first: SourceLocation) -> dict[str, list[str]]:
    """Ansible's reconcile: `ungrouped` holds exactly the hosts of no other group; every group
    hangs below `all` unless it is some group's child. Returns each host's direct groups."""
    groups = graph.groups
    ungrouped = graph.group("ungrouped", first)
    graph.group("all", first)
    parents = _parents(groups)
    direct: dict[str, list[str]] = {h: [] for h in graph.hosts}
    for draft in groups.values():
        for host in draft.hosts:
            direct[host].append(draft.name)
    for host, names in direct.items():
        if _ancestors(names, parents) - {"all", "ungrouped"}:
            if host in ungrouped.hosts:  # listed before a section, and in a group too
                ungrouped.hosts.remove(host)
                names.remove("ungrouped")
        elif host not in ungrouped.hosts:
            ungrouped.hosts.append(host)
            names.append("ungrouped")
    # as Ansible: the hosts declared in `ungrouped` first, then the ones reconcile added
    top = groups["all"]
    top.hosts = []  # every host is reached through a child group
    if "ungrouped" not in top.children:
        top.children.append("ungrouped")
    nested = {c for g, d in groups.items() if g != "all" for c in d.children}
    top.children = [c for c in top.children if c not in nested]
    return {h: [g for g in names if g != "all"] for h, names in direct.items()}


def _parents(groups: Mapping[str, GroupDraft]) -> dict[str, set[str]]:
    parents: dict[str, set[str]] = {g: set() for g in groups}
    for draft in groups.values():
        for child in draft.children:
            parents[child].add(draft.name)
    return parents


def _ancestors(names: Sequence[str], parents: Mapping[str, set[str]]) -> set[str]:
    out: set[str] = set()
    stack = list(names)
    while stack:
        g = stack.pop()
        if g not in out:
            out.add(g)
            stack.extend(parents.get(g, ()))
    return out


def _resolve(
    graph: InventoryGraph,
    folders: list[Path],
    playbook_dir: Path | None,
    first: SourceLocation,
    source: str,
) -> Inventory:
    """Apply Ansible's variable precedence (module doc) to every host of the graph."""
    direct = _reconcile(graph, first)
    groups = graph.groups
    parents = _parents(groups)
    depth = _depths(groups)
    files = _VarsFiles()
    # Each source's folder in source order (a folder twice is read twice, as in Ansible), then
    # the playbook's: its files win.
    beside = [*folders, *([playbook_dir] if playbook_dir is not None else [])]

    hosts: dict[str, Host] = {}
    for name, hdraft in graph.hosts.items():
        member_of = _ancestors(direct[name], parents) - {"all"}
        ordered = sorted(member_of, key=lambda g: (depth[g], groups[g].priority, g))
        merged = VarLayer()
        merged.update(groups["all"].vars)
        for g in ordered:
            merged.update(groups[g].vars)
        for folder in beside:
            merged.update(files.layer(folder, "group_vars", "all"))
        for folder in beside:
            for g in ordered:
                merged.update(files.layer(folder, "group_vars", g))
        merged.update(hdraft.vars)
        for folder in beside:
            merged.update(files.layer(folder, "host_vars", name))
        hosts[name] = host_from_vars(name, hdraft.location, merged, tuple(sorted(member_of)))

    def group_vars(draft: GroupDraft) -> dict[str, Any]:
        values = dict(draft.vars.values)
        for folder in beside:
            values.update(files.layer(folder, "group_vars", draft.name).values)
        return values

    return Inventory(
        hosts=hosts,
        groups={
            name: Group(
                name=name,
                hosts=tuple(d.hosts),
                children=tuple(d.children),
                vars=group_vars(d),
            )
            for name, d in groups.items()
        },
        source=source,
    )
