"""A key path into playbook or inventory data, and how messages write it."""

from __future__ import annotations

KeyPath = tuple[str | int, ...]


def format_key_path(path: KeyPath) -> str:
    """`("server", "args", 0, "tp-size")` -> `server.args[0].tp-size`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
