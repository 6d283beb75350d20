"""Connection variables of a resolved host -> the `Host` orch connects to.

Ansible's names (`ansible_host`, `ansible_port`, `ansible_user`, ...) and orch's plain ones
(`host`, `port`, `user`, ...) are read alike; a bad value is an InputError where it was set.
`orch_executor: slurm` (with `slurm_*` options) makes the host a Slurm login host: each command
then runs as a Slurm job there.
"""

from __future__ import annotations

import contextlib
import math
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.config.host import (
    DEFAULT_PENDING_TIMEOUT,
    ConnectionKind,
    ExecutorKind,
    Host,
    SlurmOptions,
)
from orchestrator.config.inventory.graph import VarLayer
from orchestrator.config.values import describe, is_template, suggest
from orchestrator.errors import InputError, SourceLocation

_CONNECTIONS: dict[str, ConnectionKind] = {
    "local": "local",
    "ssh": "ssh",
    "smart": "ssh",  # Ansible's default: ssh
    "paramiko": "ssh",
    "paramiko_ssh": "ssh",
}
_EXECUTORS: dict[str, ExecutorKind] = {"direct": "direct", "slurm": "slurm"}
_TRUE = {"true", "yes", "on", "1", "y"}
_FALSE = {"false", "no", "off", "0", "n"}


# srun's job-name options, as one word (`--job-name=x`, `-Jx`)
_JOB_NAME = ("--job-name=", "-J")
PRICE_VAR = "orch_gpu_hour_usd"  # what one GPU-hour of the host costs (cost per million tokens)


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

    executor: ExecutorKind = "direct"
    found = pick("orch_executor")
    if found is not None:
        var, value = found
        known = _EXECUTORS.get(value) if isinstance(value, str) else None
        if known is None:
            raise bad(
                var,
                f"unknown executor {value!r} (orch runs commands direct or through slurm)",
                suggest(str(value), _EXECUTORS),
            )
        executor = known

    price: float | None = None
    found = pick(PRICE_VAR)
    if found is not None:
        var, value = found
        if isinstance(value, str):
            with contextlib.suppress(ValueError):  # not a number: refused below
                value = float(value.strip())
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0:
            raise bad(
                var, f"expected USD per GPU-hour (a number, 0 or more), got {describe(value)}"
            )
        price = float(value)

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
        executor=executor,
        slurm=_slurm_options(pick, text, bad) if executor == "slurm" else None,
        location=location,
        gpu_hour_usd=price,
    )


def executor_from_vars(
    name: str, values: Mapping[str, Any], location: SourceLocation
) -> tuple[ExecutorKind, SlurmOptions | None]:
    """`orch_executor` and the `slurm_*` options of recorded host vars (a bundle's
    inventory.json), read as an inventory reads them: a replayed Slurm host stays on Slurm."""
    host = host_from_vars(name, location, VarLayer(values=dict(values)), ())
    return host.executor, host.slurm


def price_from_vars(name: str, values: Mapping[str, Any], location: SourceLocation) -> float | None:
    """`orch_gpu_hour_usd` of recorded host vars (a bundle's inventory.json), checked as an
    inventory checks it: a replayed cell is priced as the run was."""
    if values.get(PRICE_VAR) is None:
        return None
    return host_from_vars(name, location, VarLayer(values=dict(values)), ()).gpu_hour_usd


def _slurm_options(
    pick: Callable[[str], tuple[str, Any] | None],
    text: Callable[[str], str | None],
    bad: Callable[[str, str], InputError],
) -> SlurmOptions:
    """The `slurm_*` vars of a Slurm host, each checked where it was set."""

    def number(name: str, default: float | None, *, whole: bool) -> float | None:
        found = pick(name)
        if found is None:
            return default
        var, value = found
        if isinstance(value, str):
            with contextlib.suppress(ValueError):  # not a number: refused below
                value = int(value.strip()) if whole else float(value.strip())
        kinds = (int,) if whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or value < (1 if whole else 0):
            wanted = "a whole number of nodes (1 or more)" if whole else "seconds (0 or more)"
            raise bad(var, f"expected {wanted}, got {describe(value)}")
        return float(value)

    extra: tuple[str, ...] = ()
    found = pick("slurm_extra")
    if found is not None:
        var, value = found
        if isinstance(value, str):
            try:
                extra = tuple(shlex.split(value))
            except ValueError as exc:
                raise bad(var, f"cannot split slurm_extra like a shell: {exc}") from exc
        elif isinstance(value, list) and all(isinstance(v, str | int) for v in value):
            extra = tuple(str(v) for v in value)
        else:
            raise bad(var, f"expected srun options as a string or a list, got {describe(value)}")
        named = [o for o in extra if o in ("-J", "--job-name") or o.startswith(_JOB_NAME)]
        if named:
            raise bad(
                var,
                f"slurm_extra may not name the job ({named[0]}): orch names each job to find it "
                "in squeue, cancel it and settle it on --resume",
            )
    pending = number("slurm_pending_timeout", DEFAULT_PENDING_TIMEOUT, whole=False)
    return SlurmOptions(
        partition=text("slurm_partition"),
        account=text("slurm_account"),
        qos=text("slurm_qos"),
        gres=text("slurm_gres"),
        time=text("slurm_time"),
        nodes=int(number("slurm_nodes", 1, whole=True) or 1),
        extra=extra,
        pending_timeout=pending or None,  # 0: wait for resources as long as the command may
    )
