"""A key path into playbook or inventory data, and how messages write it."""

from __future__ import annotations

from orchestrator.config.values import quotable

KeyPath = tuple[str | int, ...]


def format_key_path(path: KeyPath) -> str:
    """`("server", "args", 0, "tp-size")` -> `server.args[0].tp-size`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            # a key read from a file that is not a playbook (a /etc/shadow line) is not echoed
            part = part if quotable(part) else "<key>"
            out += f".{part}" if out else str(part)
    return out
