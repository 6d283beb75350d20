"""Host keys for SSH: which known_hosts files count, and what happens to an unknown key.

Fabric auto-adds unknown keys and never loads known_hosts (docs/FACTS.md). Here the system,
user, ssh-config and inventory known_hosts files are loaded, and an unknown or changed key is
refused (`HostKeyError`, never retried) unless the inventory sets `host_key_checking: false`:
then any key is accepted in memory only, and logged.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import paramiko

from orchestrator.config.host import Host
from orchestrator.errors import HostKeyError

log = logging.getLogger(__name__)

SYSTEM_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
USER_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


class UnknownHostKey(Exception):
    """Raised by the reject policy during the handshake; turned into HostKeyError by `refusal`."""

    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname = hostname
        self.key = key


class _RejectUnknownKey(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: Any) -> None:
        raise UnknownHostKey(hostname, key)


class _AcceptAnyKey(paramiko.MissingHostKeyPolicy):
    """host_key_checking: false — accept in memory only, log what was accepted."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: Any) -> None:
        log.warning(
            "host key checking is off: accepting %s key %s for %s",
            key.get_name(),
            key.fingerprint,
            hostname,
        )
        client.get_host_keys().add(hostname, key.get_name(), key)


def known_hosts_files(host: Host, ssh_config: Any) -> list[Path]:
    """System and user files, ssh config's Global/UserKnownHostsFile, then the inventory's."""
    files = [SYSTEM_KNOWN_HOSTS, USER_KNOWN_HOSTS]
    for key in ("globalknownhostsfile", "userknownhostsfile"):
        value = ssh_config.get(key)
        if value:
            files.extend(Path(item) for item in str(value).split())
    if host.known_hosts:
        files.append(Path(host.known_hosts))
    return [path.expanduser() for path in files]


def apply_policy(client: paramiko.SSHClient, host: Host, ssh_config: Any) -> None:
    """Load the known keys into `client` and refuse others, or accept any when checking is off."""
    if host.host_key_checking:
        for path in known_hosts_files(host, ssh_config):
            if path.is_file():
                client.load_system_host_keys(str(path))
        client.set_missing_host_key_policy(_RejectUnknownKey())
    else:
        client.set_missing_host_key_policy(_AcceptAnyKey())


def is_refusal(exc: BaseException) -> bool:
    """True for a key the policy refused: unknown, or different from the one on record."""
    return isinstance(exc, UnknownHostKey | paramiko.BadHostKeyException)


def refusal(exc: BaseException, host: Host, address: str, port: int) -> HostKeyError:
    """The error to raise for a refused key (`is_refusal(exc)`), with how to fix it."""
    where = f"{address}:{port}"
    if isinstance(exc, UnknownHostKey):
        return HostKeyError(
            f"host key for {host.name} ({where}) is not in known_hosts: the server "
            f"offers {exc.key.get_name()} {exc.key.fingerprint}",
            hint=f"add it with `ssh-keyscan -p {port} {address} >> ~/.ssh/known_hosts` "
            "(after checking it), or set host_key_checking: false for this host",
        )
    assert isinstance(exc, paramiko.BadHostKeyException)
    return HostKeyError(
        f"host key for {host.name} ({where}) has CHANGED: the server offers "
        f"{exc.key.get_name()} {exc.key.fingerprint} but known_hosts has "
        f"{exc.expected_key.fingerprint}; this may be a man-in-the-middle attack",
        hint=f"if the host was reinstalled, remove its old line with `ssh-keygen -R {address}` "
        "and add the new key",
    )
