"""Which files an inventory source (`-i PATH`, once or more) stands for, as Ansible reads them.

A file is itself. A directory is every file in it and below it, in name order, except hidden
names, `group_vars/` and `host_vars/`, and the extensions Ansible ignores there (`.bak`, `.md`,
`.cfg`, `.retry`, `~`, ...). Formats orch does not read are refused at their first telling line,
with the command that converts them: Ansible's INI format and executable inventory scripts.
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.errors import InputError, SourceLocation

# Ansible's REJECT_EXTS plus the inventory-only ones (INVENTORY_IGNORE_EXTS). `.ini` stays
# readable: a `.ini` inventory is refused with how to convert it rather than silently skipped.
IGNORED_SUFFIXES = (
    ".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst",
    ".orig", ".cfg", ".retry",
)  # fmt: skip
_VARS_DIRS = {"group_vars", "host_vars"}

# Lines only Ansible's INI inventory format has, at column 0 (where YAML and JSON cannot have
# them): a `[group]` / `[group:vars]` / `[group:children]` header, or `host key=value ...`.
_INI_GROUP = re.compile(r"^\[[A-Za-z0-9_.\-]+(:(vars|children))?\]\s*([#;].*)?$")
_INI_HOST_VARS = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+(\s+[A-Za-z_]\w*=\S*)+\s*([#;].*)?$")


def inventory_files(source: Path) -> list[Path]:
    """The files `source` stands for: itself when a file, a directory's inventory files in order.

    A directory without one is an InputError; a missing file is left for load_yaml to report.
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


def refuse_unreadable_format(path: Path) -> None:
    """An inventory script or an INI inventory is an InputError saying how to convert it."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return  # load_yaml reports a missing or unreadable file
    convert = (
        f"convert it: ansible-inventory -i {path} --list > inventory.json, "
        "then pass -i inventory.json"
    )
    if text.startswith("#!"):
        raise InputError(
            "inventory scripts are not run: this file starts with '#!' (a dynamic inventory); "
            "orch reads YAML or JSON inventories",
            location=SourceLocation(str(path), 1, 1),
            hint=convert,
        )
    for number, line in enumerate(text.splitlines(), start=1):
        if _INI_GROUP.match(line) or _INI_HOST_VARS.match(line):
            raise InputError(
                f"INI inventories are not supported: {line.strip()!r} is Ansible's INI "
                "format; orch reads YAML or JSON inventories",
                location=SourceLocation(str(path), number, 1),
                hint=convert,
            )


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
