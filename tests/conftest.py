"""Shared session fixtures: the real sshd test hosts (tests/sshhosts.py)."""

from __future__ import annotations

import compileall
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshhosts import SSHTestHosts, sshd_available

from orchestrator import errors

ROOT = Path(__file__).resolve().parents[1]
# The simulator's start-to-start spread is off unless a test asks for it (ORCH_SIM_START_SD or
# --start-sd): tests that compare cells across server starts were written for one level of noise.
os.environ.setdefault("ORCH_SIM_START_SD", "0")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile orchestrator/ once, so every `python -m orchestrator ...` a test starts loads
    cached bytecode: where PYTHONDONTWRITEBYTECODE is set (it is on the machines this suite runs
    on) no process writes any, and each start compiled every module it imports again, 0.3-0.6 s
    per `orch` subprocess."""
    compileall.compile_dir(ROOT / "orchestrator", quiet=1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `session_last` run after every other test: each reads the outcome of work
    its directory started in the background at its session fixture (the Slurm time-limit job
    takes 60-90 s), which by then has long finished instead of being waited for."""
    last = [item for item in items if item.get_closest_marker("session_last")]
    items[:] = [item for item in items if not item.get_closest_marker("session_last")] + last


@pytest.fixture(scope="session")
def ssh_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHTestHosts]:
    """Three running sshd hosts (network namespaces as root, loopback ports otherwise); host3
    has no SFTP subsystem.

    Skipped only where sshd is not installed; under CI (CI=true) a missing sshd is a failure,
    because CI installs openssh-server and these tests must run there.
    """
    if not sshd_available():
        if os.environ.get("CI"):
            pytest.fail("sshd is not installed but CI must run the ssh tests")
        pytest.skip("sshd is not installed (apt-get install openssh-server)")
    # host3 has no SFTP subsystem (hardened hosts often disable it): orch must not need one.
    with SSHTestHosts(3, tmp_path_factory.mktemp("sshhosts"), without_sftp=("host3",)) as hosts:
        yield hosts


@pytest.fixture(scope="session")
def ssh_inventory(ssh_hosts: SSHTestHosts, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Ansible YAML inventory file for the three test hosts."""
    return ssh_hosts.write_inventory(tmp_path_factory.mktemp("inventory") / "hosts.yml")


@pytest.fixture(autouse=True)
def _forget_secret_values() -> Iterator[None]:
    """Each test starts with no secret values noted (errors.KNOWN_SECRETS is per process, as
    a CLI run is): one test's secret "x" must not hide another test's key named x."""
    yield
    errors.KNOWN_SECRETS.forget()
