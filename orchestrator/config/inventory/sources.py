"""Which files an inventory source (`-i PATH`, once or more) stands for, as Ansible reads them.

A file is itself. A directory is every file in it and below it, in name order, except hidden
names, `group_vars/` and `host_vars/`, and the extensions Ansible ignores there (`.bak`, `.md`,
`.cfg`, `.retry`, `~`, ...). Each file is YAML/JSON or INI (inventory_format); an executable
inventory script is refused with the command that saves its output. A source that is no path and
holds a comma is Ansible's host list (`-i gpu01,gpu02,`); with no -i, ANSIBLE_INVENTORY names the
sources.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from orchestrator.config.inventory.graph import bracketed_address
from orchestrator.errors import InputError, SourceLocation

# Ansible's REJECT_EXTS plus the inventory-only ones (INVENTORY_IGNORE_EXTS).
IGNORED_SUFFIXES = (
    ".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst",
    ".orig", ".cfg", ".retry",
)  # fmt: skip
_VARS_DIRS = {"group_vars", "host_vars"}
InventoryFormat = Literal["yaml", "ini"]

# Lines only Ansible's INI inventory format has, at column 0 (where YAML and JSON cannot have
# them): a `[group]` / `[group:vars]` / `[group:children]` header, or `host key=value ...`.
_INI_GROUP = re.compile(r"^\[[A-Za-z0-9_.\-]+(:(vars|children))?\]\s*([#;].*)?$")
_INI_HOST_VARS = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+(\s+[A-Za-z_]\w*=\S*)+\s*([#;].*)?$")
# The first line of a YAML or JSON inventory: a document start, a flow mapping or `key:`.
_YAML_START = re.compile(r"^(---|\{|[^\s#;=\[][^=]*?:(\s|$))")


def inventory_files(source: Path) -> list[Path]:
    """The files `source` stands for: itself when a file, a directory's inventory files in order.

    A directory without one is an InputError; a missing file is left for the caller to report.
    """
    if source.is_dir():
        files = list(_walk(source))
        if not files:
            raise InputError(
                f"inventory directory {source} holds no inventory files",
                location=SourceLocation(str(source)),
                hint="put a YAML or JSON inventory such as hosts.yml in it; group_vars/, "
                "host_vars/ and ignored extensions (.md, .cfg, .bak, ...) do not count",
            )
        return files
    return [source]


def vars_folder(source: Path) -> Path:
    """Where a source's group_vars/ and host_vars/ live: inside a directory, beside a file."""
    return source if source.is_dir() else source.parent


def inventory_format(path: Path, text: str) -> InventoryFormat:
    """Whether `text` (the content of `path`) is an INI or a YAML/JSON inventory.

    `.ini` is INI; a line only INI has (`[group]`, `host key=value`) makes any file INI; other
    `.yml`/`.yaml`/`.json` files are YAML. A file with another name is YAML when its first line
    opens a mapping (`name:`, `{`, `---`), else INI (a bare host list). An executable inventory
    script (`#!`) is an InputError: orch does not run them.
    """
    if text.startswith("#!"):
        raise InputError(
            "inventory scripts are not run: this file starts with '#!' (a dynamic inventory); "
            "orch reads YAML, JSON and INI inventories",
            location=SourceLocation(str(path), 1, 1),
            hint=f"save its output once: ansible-inventory -i {path} --list > inventory.json, "
            "then pass -i inventory.json",
        )
    if path.suffix == ".ini":
        return "ini"
    lines = text.splitlines()
    if any(_INI_GROUP.match(line) or _INI_HOST_VARS.match(line) for line in lines):
        return "ini"
    if path.suffix in (".yml", ".yaml", ".json"):
        return "yaml"
    first = next((ln for ln in lines if ln.strip() and not ln.lstrip().startswith(("#", ";"))), "")
    return "yaml" if _YAML_START.match(first) else "ini"


def is_host_list(source: Path) -> bool:
    """`-i host1,host2,` (Ansible's host list): a comma in a source that is no existing path."""
    return "," in str(source) and not source.exists()


def host_list_entries(source: Path) -> list[tuple[str, int | None]]:
    """The (host, port) pairs of a host list: `-i gpu01,gpu02:2222,`; empty entries skipped.

    As Ansible's host_list plugin: no ranges, no variables; a name with a space is an InputError.
    """
    entries: list[tuple[str, int | None]] = []
    for part in str(source).split(","):
        entry = part.strip()
        if not entry:
            continue
        bracketed = bracketed_address(entry)  # [::1]:2200, as Ansible's host_list reads it
        if bracketed is not None:
            name, port = bracketed[0], str(bracketed[1])
        else:
            name, _, port = entry.rpartition(":")
            if not (name and port.isdigit() and ":" not in name):  # a bare IPv6 stays whole
                name, port = entry, ""
        if any(c.isspace() for c in name):
            raise InputError(
                f"host {name!r} in the host list holds a space",
                location=SourceLocation(f"-i {source}"),
                hint="separate hosts with commas: -i gpu01,gpu02,",
            )
        entries.append((name, int(port) if port else None))
    return entries


def sources_from_environment(environ: Mapping[str, str]) -> list[Path]:
    """ANSIBLE_INVENTORY, used when no -i is given: comma-separated paths, as Ansible reads it."""
    value = environ.get("ANSIBLE_INVENTORY", "")
    return [Path(part.strip()).expanduser() for part in value.split(",") if part.strip()]


def _walk(folder: Path) -> list[Path]:
    out: list[Path] = []
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.name.startswith("."):
            continue
        if item.is_dir():
            if item.name not in _VARS_DIRS:
                out.extend(_walk(item))
        elif item.is_file() and not item.name.endswith(IGNORED_SUFFIXES):
            out.append(item)
    return out
