"""Connection variables of a resolved host -> the `Host` orch connects to.

Ansible's names (`ansible_host`, `ansible_port`, `ansible_user`, ...) and orch's plain ones
(`host`, `port`, `user`, ...) are read alike; a bad value is an InputError where it was set.
"""

from __future__ import annotations

from typing import Any

from orchestrator.config.host import ConnectionKind, Host
from orchestrator.config.inventory_graph import VarLayer
from orchestrator.config.values import describe, is_template, suggest
from orchestrator.errors import InputError, SourceLocation

_CONNECTIONS: dict[str, ConnectionKind] = {
    "local": "local",
    "ssh": "ssh",
    "smart": "ssh",  # Ansible's default: ssh
    "paramiko": "ssh",
    "paramiko_ssh": "ssh",
}
_TRUE = {"true", "yes", "on", "1", "y"}
_FALSE = {"false", "no", "off", "0", "n"}


def host_from_vars(
    name: str,
    location: SourceLocation,
    merged: VarLayer,
    groups: tuple[str, ...],
    *,
    connection: ConnectionKind = "ssh",
) -> Host:
    """The Host for merged vars; `connection` is the kind when no variable names one."""
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

    kind = connection
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
