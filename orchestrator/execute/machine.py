"""This machine's identity, as run.json records it: `orch replay` tells a bundle made here from
one made elsewhere by it."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

# systemd's id first, D-Bus's where systemd is absent; the hostname when neither exists.
_MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


def machine_id() -> str:
    """A hash of this machine's id (never the id itself, which some treat as confidential)."""
    source = ""
    for path in _MACHINE_ID_FILES:
        try:
            source = path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        if source:
            break
    source = f"machine-id:{source}" if source else f"hostname:{socket.gethostname()}"
    return "sha256:" + hashlib.sha256(source.encode()).hexdigest()[:16]
