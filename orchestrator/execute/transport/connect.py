"""Connections to hosts: `connect(host)` opens the transport the host asks for, with retries.

The public face of orch's transports; importers need nothing else from them:
`Connection` and `RunResult` (the interface, `transport.py`), `CommandTimeout`, and `connect`.
Transports: `local.py` (subprocess), `ssh.py` (Fabric + paramiko; host keys in `hostkeys.py`),
`slurm.py` (each command a Slurm job, through srun on a local or SSH login connection).
A new one is one module implementing `Connection` plus one branch in `connect`.

Retry policy: network trouble while opening is retried with exponential backoff and jitter;
host key and authentication failures are not (`_is_retryable`).
"""

from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from orchestrator.config.host import Host, SlurmOptions
from orchestrator.errors import ConnectionFailure, OrchError
from orchestrator.execute.transport.base import CommandTimeout, Connection, RunResult
from orchestrator.execute.transport.local import LocalConnection
from orchestrator.execute.transport.slurm.connection import SlurmConnection

if TYPE_CHECKING:
    from orchestrator.execute.transport.ssh import SSHConnection

__all__ = [
    "CommandTimeout",
    "Connection",
    "LocalConnection",
    "RunResult",
    "SSHConnection",
    "SlurmConnection",
    "connect",
]

log = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    # Fabric and paramiko (about 0.13 s of imports) load only once SSH is used: `orch plan`,
    # a local run and the simulator never pay for them.
    if name == "SSHConnection":
        from orchestrator.execute.transport.ssh import SSHConnection

        return SSHConnection
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def connect(
    host: Host,
    *,
    connect_timeout: float = 10.0,
    keepalive: int = 15,
    attempts: int = 4,
    retry_initial_wait: float = 0.5,
    retry_max_wait: float = 8.0,
    ssh_config_path: Path | None = None,
) -> Connection:
    """Open a connection to `host`: local for `connection: local`, otherwise SSH; wrapped in
    a `SlurmConnection` (that connection is then the login host) for `orch_executor: slurm`.

    SSH honours ssh config (default ~/.ssh/config and /etc/ssh/ssh_config, or
    `ssh_config_path`): Host aliases, HostName, Port, User, IdentityFile, ProxyJump,
    UserKnownHostsFile; inventory values (address, port, user, key) override it.
    Connection errors are retried `attempts` times with exponential backoff and jitter; host
    key and authentication failures are not. Raises `HostKeyError` or `ConnectionFailure`.
    """
    if host.executor == "slurm":
        login = _open(host, connect_timeout, keepalive, attempts, retry_initial_wait,
                      retry_max_wait, ssh_config_path)  # fmt: skip
        return SlurmConnection(login, host.slurm or SlurmOptions(), host=host)
    return _open(host, connect_timeout, keepalive, attempts, retry_initial_wait, retry_max_wait,
                 ssh_config_path)  # fmt: skip


def _open(
    host: Host,
    connect_timeout: float,
    keepalive: int,
    attempts: int,
    retry_initial_wait: float,
    retry_max_wait: float,
    ssh_config_path: Path | None,
) -> Connection:
    """The plain connection to `host` (local or SSH, with retries): see `connect`."""
    if host.connection == "local":
        return LocalConnection(host)
    from orchestrator.execute.transport.ssh import open_ssh

    def attempt() -> SSHConnection:
        return open_ssh(host, connect_timeout, keepalive, ssh_config_path)

    def log_retry(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        log.info("connect to %s failed (attempt %d): %s", host.name, state.attempt_number, failure)

    retrying = Retrying(
        stop=stop_after_attempt(max(1, attempts)),
        # exponential plus jitter, spelt with parts every tenacity >= 8 has (the jitter
        # variant's arguments changed name in 9.x)
        wait=wait_exponential(multiplier=retry_initial_wait, max=retry_max_wait)
        + wait_random(0, retry_initial_wait),
        retry=retry_if_exception(_is_retryable),
        before_sleep=log_retry,
        reraise=True,
    )
    try:
        return retrying(attempt)
    except OrchError:
        raise
    except Exception as exc:
        where = _where(host)
        tries = retrying.statistics.get("attempt_number", 1)
        if _is_retryable(exc):
            raise ConnectionFailure(
                f"cannot connect to {host.name} ({where}) after {tries} attempt"
                f"{'s' if tries != 1 else ''}: {_describe(exc)}",
                hint="check the address and port, and that sshd runs there",
            ) from exc
        raise ConnectionFailure(f"cannot connect to {host.name} ({where}): {exc}") from exc


def _is_retryable(exc: BaseException) -> bool:
    """Network trouble is retried; host keys, authentication and our own errors are not."""
    import paramiko  # loaded already: only an SSH attempt gets here

    from orchestrator.execute.transport import hostkeys

    if isinstance(exc, OrchError) or hostkeys.is_refusal(exc):
        return False
    if isinstance(exc, paramiko.AuthenticationException):
        return False
    if isinstance(exc, paramiko.SSHException):
        return "authentication" not in str(exc).lower()
    return isinstance(exc, OSError | EOFError)


def _describe(exc: BaseException) -> str:
    """The last cause in a few words: 'connection refused', 'timed out', ..."""
    import paramiko  # loaded already: only an SSH attempt gets here

    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        codes = {getattr(e, "errno", None) for e in exc.errors.values()}
        if errno.ECONNREFUSED in codes:
            return "connection refused"
        if errno.EHOSTUNREACH in codes:
            return "no route to host"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    text = str(exc)
    if "banner" in text.lower():
        return f"timed out waiting for the SSH banner ({text})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return text or type(exc).__name__


def _where(host: Host) -> str:
    return f"{host.target}:{host.port or 22}"
