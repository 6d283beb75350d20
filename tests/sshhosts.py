"""Real OpenSSH test hosts: N `sshd` processes with generated keys, for tests and bench/ scripts.

As root, where `ip netns` works, each host is its own network namespace (own address on a veth
pair, sshd on port 22), its own UTS hostname, and its own mount namespace in which a per-host
directory is bind-mounted over root's home, so each host has its own `~` (and no `~/.bashrc`
prepending to PATH). Otherwise every sshd listens on 127.0.0.1 at a free port and the hosts share
this user's home.

Each host gets `<base>/<name>/` (its state dir; `ORCH_SIM_STATE=<base>/<name>/state.json`) and
`<base>/<name>/bin`, which is first on PATH for every command run over SSH on that host (via
sshd's `SetEnv`, applied after sshd's default PATH).

No pytest import here: bench/ scripts use this module too.
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from netns import collect_stale_namespaces as _collect_stale
from netns import kill_namespace_processes, pick_subnet
from netns import run as _run

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
NETNS_PREFIX = "orcht"  # namespaces are `orcht-<creator pid>-<random>-<index>`
SUBNET_PREFIX = "10.231"  # each run takes one free 10.231.S.0/24, each host a /30 in it
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MARKER_VAR = "ORCH_TESTHOST_RUN"  # set in every SSH session: finds leftovers at teardown


def sshd_available() -> bool:
    """True when an OpenSSH server binary and ssh-keygen are installed."""
    return os.access(SSHD, os.X_OK) and os.access(SSH_KEYGEN, os.X_OK)


def _netns_usable() -> bool:
    """Root, `ip` present, and a namespace can actually be created here."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        return False
    probe = f"{NETNS_PREFIX}-{os.getpid()}-probe{secrets.token_hex(2)}"
    try:
        if _run(["ip", "netns", "add", probe], check=False).returncode != 0:
            return False
        return _run(["ip", "netns", "exec", probe, "true"], check=False).returncode == 0
    finally:
        _run(["ip", "netns", "del", probe], check=False)


def collect_stale_namespaces() -> list[str]:
    """Delete test-host namespaces whose creating process is gone (a crashed earlier run)."""
    return _collect_stale(NETNS_PREFIX)


def _kill_marked_processes(marker: str) -> None:
    """SIGKILL every process whose environment carries this run's marker (session leftovers)."""
    needle = f"{MARKER_VAR}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for_banner(address: str, port: int, deadline: float) -> bool:
    """Poll until sshd answers with its `SSH-` banner or the deadline passes."""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1.0) as sock:
                sock.settimeout(2.0)
                if sock.recv(4).startswith(b"SSH-"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def known_hosts_name(address: str, port: int) -> str:
    """The host field OpenSSH and paramiko look up: `addr`, or `[addr]:port` off port 22."""
    return address if port == 22 else f"[{address}]:{port}"


@dataclass(frozen=True)
class SSHTestHost:
    """One running test host."""

    name: str  # inventory name, and the UTS hostname in namespace mode
    address: str
    port: int
    state_dir: Path  # <base>/<name>/
    bin_dir: Path  # <base>/<name>/bin: first on PATH over SSH
    home: Path  # $HOME as seen over SSH on this host (a per-host dir in namespace mode)
    host_key_pub: str  # "ssh-ed25519 AAAA..." of this host's key
    namespace: str | None  # network namespace name, None in loopback mode

    @property
    def state_file(self) -> Path:
        """`ORCH_SIM_STATE` on this host."""
        return self.state_dir / "state.json"

    @property
    def known_hosts_line(self) -> str:
        """This host's line for a known_hosts file."""
        return f"{known_hosts_name(self.address, self.port)} {self.host_key_pub}"


class SSHTestHosts:
    """Start `count` real sshd hosts under `base_dir`; use as a context manager or start()/stop().

    `isolate`: True forces network namespaces (fails if unusable), False forces loopback ports,
    None (default) picks namespaces when running as root and they work; the environment variable
    `ORCH_TESTHOSTS_NETNS=0` forces loopback.
    """

    def __init__(
        self,
        count: int = 3,
        base_dir: Path | None = None,
        *,
        isolate: bool | None = None,
        start_timeout: float = 15.0,
        without_sftp: tuple[str, ...] = (),
    ) -> None:
        if not 1 <= count <= 60:
            raise ValueError("count must be between 1 and 60")
        self.count = count
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self._isolate_request = isolate
        self.start_timeout = start_timeout
        # Hosts whose sshd has no SFTP subsystem, as hardened hosts often run: orch needs none.
        self.without_sftp = set(without_sftp)
        self.isolated = False
        self.hosts: list[SSHTestHost] = []
        self.user = getpass.getuser()
        self.run_tag = f"{os.getpid()}-{secrets.token_hex(3)}"
        self._procs: list[subprocess.Popen[bytes]] = []
        self._namespaces: list[str] = []
        self._veths: list[str] = []
        self._tmp_base: Path | None = None
        self._stopped = True
        self._subnet: str | None = None

    # -- files every test needs -------------------------------------------------------------

    @property
    def user_key(self) -> Path:
        """The private ed25519 key authorized on every host."""
        return self._base / "keys" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        """A known_hosts file listing every host with its real key."""
        return self._base / "known_hosts"

    @property
    def _base(self) -> Path:
        assert self.base_dir is not None, "not started"
        return self.base_dir

    def host(self, name: str) -> SSHTestHost:
        """The host called `name`."""
        for candidate in self.hosts:
            if candidate.name == name:
                return candidate
        raise KeyError(name)

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> SSHTestHosts:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> SSHTestHosts:
        """Generate keys and configs, start every sshd and wait until each answers."""
        if not sshd_available():
            raise RuntimeError(f"sshd not found ({SSHD}): install openssh-server")
        if self.base_dir is None:
            import tempfile

            self._tmp_base = Path(tempfile.mkdtemp(prefix="orch-sshhosts-"))
            self.base_dir = self._tmp_base
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._stopped = False
        atexit.register(self.stop)
        try:
            self.isolated = self._choose_isolation()
            if self.isolated:
                collect_stale_namespaces()
                Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privsep chroot
            self._generate_user_key()
            self._start_hosts()
            self.write_known_hosts(self.known_hosts)
        except BaseException:
            self.stop()
            raise
        return self

    def _choose_isolation(self) -> bool:
        if os.environ.get("ORCH_TESTHOSTS_NETNS") == "0" and self._isolate_request is None:
            return False
        if self._isolate_request is False:
            return False
        usable = _netns_usable()
        if self._isolate_request and not usable:
            raise RuntimeError("network namespaces requested but not usable (need root and ip)")
        return usable

    def _generate_user_key(self) -> None:
        keys = self._base / "keys"
        keys.mkdir(exist_ok=True)
        if not self.user_key.exists():
            _run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "orch-test-user", "-f",
                  str(self.user_key)])  # fmt: skip
        self.user_key.chmod(0o600)
        (self._base / "authorized_keys").write_text(self.user_key.with_suffix(".pub").read_text())

    def _start_hosts(self) -> None:
        if self.isolated:
            self._subnet = pick_subnet(SUBNET_PREFIX, "test hosts")
        for index in range(self.count):
            name = f"host{index + 1}"
            state_dir = self._base / name
            (state_dir / "bin").mkdir(parents=True, exist_ok=True)
            (state_dir / "sshd").mkdir(exist_ok=True)
            key = state_dir / "sshd" / "ssh_host_ed25519_key"
            if not key.exists():
                _run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)])
            key.chmod(0o600)
            host_key_pub = " ".join(key.with_suffix(".pub").read_text().split()[:2])
            if self.isolated:
                host = self._start_isolated(index, name, state_dir, key, host_key_pub)
            else:
                host = self._start_loopback(name, state_dir, key, host_key_pub)
            self.hosts.append(host)

    def _sshd_config(
        self, state_dir: Path, key: Path, address: str, port: int, *, also_loopback: bool = False
    ) -> Path:
        bin_dir = state_dir / "bin"
        env = {
            "PATH": f"{bin_dir}:{DEFAULT_PATH}",
            "ORCH_SIM_STATE": str(state_dir / "state.json"),
            "ORCH_SIM_START_SD": os.environ.get("ORCH_SIM_START_SD", "0"),
            MARKER_VAR: self.run_tag,
        }
        setenv = " ".join(f'"{k}={v}"' for k, v in env.items())
        lines = [
            f"ListenAddress {address}:{port}",
            # inside a namespace, also 127.0.0.1:22: a ProxyJump target reachable from the host
            *([f"ListenAddress 127.0.0.1:{port}"] if also_loopback else []),
            f"HostKey {key}",
            f"PidFile {state_dir / 'sshd' / 'sshd.pid'}",
            f"AuthorizedKeysFile {self._base / 'authorized_keys'}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "StrictModes no",
            "PrintMotd no",
            "UseDNS no",
            "LogLevel VERBOSE",
            *([] if state_dir.name in self.without_sftp else ["Subsystem sftp internal-sftp"]),
            f"SetEnv {setenv}",
        ]
        config = state_dir / "sshd" / "sshd_config"
        config.write_text("\n".join(lines) + "\n")
        _run([SSHD, "-t", "-f", str(config)])  # a config error surfaces here, clearly
        return config

    def _start_loopback(
        self, name: str, state_dir: Path, key: Path, host_key_pub: str
    ) -> SSHTestHost:
        last_log = ""
        for _attempt in range(5):  # a free port can be taken between probe and bind: retry
            port = _free_port()
            config = self._sshd_config(state_dir, key, "127.0.0.1", port)
            log = state_dir / "sshd" / "sshd.log"
            proc = subprocess.Popen(
                [SSHD, "-D", "-f", str(config), "-E", str(log)],
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self._procs.append(proc)
            if _wait_for_banner("127.0.0.1", port, time.monotonic() + self.start_timeout):
                return SSHTestHost(
                    name=name,
                    address="127.0.0.1",
                    port=port,
                    state_dir=state_dir,
                    bin_dir=state_dir / "bin",
                    home=Path(pwd.getpwuid(os.getuid()).pw_dir),
                    host_key_pub=host_key_pub,
                    namespace=None,
                )
            proc.kill()
            proc.wait()
            last_log = log.read_text(errors="replace") if log.exists() else ""
        raise RuntimeError(f"sshd for {name} did not start on loopback:\n{last_log}")

    def _start_isolated(
        self, index: int, name: str, state_dir: Path, key: Path, host_key_pub: str
    ) -> SSHTestHost:
        assert self._subnet is not None
        namespace = f"{NETNS_PREFIX}-{self.run_tag}-{index}"
        short = secrets.token_hex(3)
        outer, inner = f"ot{short}o{index}", f"ot{short}i{index}"  # <= 15 chars
        outer_ip = f"{self._subnet}{4 * index + 1}"
        inner_ip = f"{self._subnet}{4 * index + 2}"
        _run(["ip", "netns", "add", namespace])
        self._namespaces.append(namespace)
        _run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
        self._veths.append(outer)
        _run(["ip", "link", "set", inner, "netns", namespace])
        _run(["ip", "addr", "add", f"{outer_ip}/30", "dev", outer])
        _run(["ip", "link", "set", outer, "up"])
        _run(["ip", "-n", namespace, "addr", "add", f"{inner_ip}/30", "dev", inner])
        _run(["ip", "-n", namespace, "link", "set", inner, "up"])
        _run(["ip", "-n", namespace, "link", "set", "lo", "up"])

        config = self._sshd_config(state_dir, key, inner_ip, 22, also_loopback=True)
        home = state_dir / "home"
        home.mkdir(exist_ok=True)
        hosts_file = state_dir / "sshd" / "etc_hosts"
        hosts_file.write_text(
            Path("/etc/hosts").read_text() + f"\n127.0.1.1 {name}\n{inner_ip} {name}\n"
        )
        real_home = Path(pwd.getpwuid(0).pw_dir)
        script = [
            "set -e",
            f"hostname {shlex.quote(name)}",
            f"mount --bind {shlex.quote(str(hosts_file))} /etc/hosts",
        ]
        for top in sorted(self._home_entries_to_keep(real_home)):
            source, target = real_home / top, home / top
            if source.is_dir():
                target.mkdir(exist_ok=True)
            else:
                target.touch(exist_ok=True)
            script.append(f"mount --rbind {shlex.quote(str(source))} {shlex.quote(str(target))}")
        script.append(f"mount --rbind {shlex.quote(str(home))} {shlex.quote(str(real_home))}")
        log = state_dir / "sshd" / "sshd.log"
        script.append(f"exec {shlex.quote(SSHD)} -D -f {shlex.quote(str(config))} -E {log}")
        argv = ["ip", "netns", "exec", namespace, "unshare", "--uts", "--mount",
                "--propagation", "private", "sh", "-c", "\n".join(script)]  # fmt: skip
        startup_log = state_dir / "sshd" / "startup.log"
        with startup_log.open("wb") as startup:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=startup, stderr=startup,
                start_new_session=True,
            )  # fmt: skip
        self._procs.append(proc)
        if not _wait_for_banner(inner_ip, 22, time.monotonic() + self.start_timeout):
            details = startup_log.read_text(errors="replace")
            if log.exists():
                details += log.read_text(errors="replace")
            raise RuntimeError(f"sshd for {name} in {namespace} did not start:\n{details}")
        return SSHTestHost(
            name=name,
            address=inner_ip,
            port=22,
            state_dir=state_dir,
            bin_dir=state_dir / "bin",
            home=home,
            host_key_pub=host_key_pub,
            namespace=namespace,
        )

    def _home_entries_to_keep(self, real_home: Path) -> set[str]:
        """Top-level entries of the real home the hosts still need (the venv's interpreter)."""
        keep: set[str] = set()
        candidates = [Path(sys.executable).resolve(), Path(sys.base_prefix), Path(sys.prefix)]
        candidates += [self._base.resolve(), Path.cwd()]
        for path in candidates:
            with contextlib.suppress(ValueError):
                relative = path.relative_to(real_home)
                if relative.parts:
                    keep.add(relative.parts[0])
        return keep

    def stop(self) -> None:
        """Kill every sshd and session, delete namespaces and veths. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        for namespace in self._namespaces:
            kill_namespace_processes(namespace)
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        _kill_marked_processes(self.run_tag)
        for veth in self._veths:
            _run(["ip", "link", "del", veth], check=False)
        for namespace in self._namespaces:
            _run(["ip", "netns", "del", namespace], check=False)
        self._procs.clear()
        self._namespaces.clear()
        self._veths.clear()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self._tmp_base is not None:
            shutil.rmtree(self._tmp_base, ignore_errors=True)

    # -- helpers for tests ------------------------------------------------------------------

    def write_known_hosts(
        self,
        path: Path,
        *,
        wrong_key_for: Sequence[str] = (),
        omit: Sequence[str] = (),
    ) -> Path:
        """Write a known_hosts file: a fresh, WRONG key for hosts in `wrong_key_for`, none for
        hosts in `omit`, the real key for every other host."""
        lines = []
        for host in self.hosts:
            if host.name in omit:
                continue
            if host.name in wrong_key_for:
                lines.append(f"{known_hosts_name(host.address, host.port)} {self._fresh_key()}")
            else:
                lines.append(host.known_hosts_line)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        return path

    def _fresh_key(self) -> str:
        scratch = self._base / "keys" / f"wrong-{secrets.token_hex(4)}"
        _run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(scratch)])
        return " ".join(scratch.with_suffix(".pub").read_text().split()[:2])

    def inventory_vars(self, host: SSHTestHost) -> dict[str, Any]:
        """Ansible connection variables that reach `host` with the test key and known_hosts."""
        return {
            "ansible_host": host.address,
            "ansible_port": host.port,
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.user_key),
            "orch_known_hosts": str(self.known_hosts),
            "ansible_python_interpreter": sys.executable,
        }

    def write_inventory(
        self,
        path: Path,
        *,
        extra_host_vars: Mapping[str, Mapping[str, Any]] | None = None,
        extra_vars: Mapping[str, Any] | None = None,
        groups: Mapping[str, Sequence[str]] | None = None,
    ) -> Path:
        """Write an Ansible YAML inventory of every host.

        `extra_host_vars`: host name -> extra vars for that host; `extra_vars`: vars for every
        host (group `all`); `groups`: group name -> host names, as child groups of `all`.
        """
        hosts: dict[str, dict[str, Any]] = {}
        for host in self.hosts:
            hostvars = self.inventory_vars(host)
            hostvars.update((extra_host_vars or {}).get(host.name, {}))
            hosts[host.name] = hostvars
        everything: dict[str, Any] = {"hosts": hosts}
        if extra_vars:
            everything["vars"] = dict(extra_vars)
        if groups:
            everything["children"] = {
                group: {"hosts": {member: None for member in members}}
                for group, members in groups.items()
            }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"all": everything}, sort_keys=False))
        return path

    def write_ssh_config(self, path: Path, *, alias_prefix: str = "alias-") -> Path:
        """Write an OpenSSH client config with a `Host <prefix><name>` block per host."""
        blocks = []
        for host in self.hosts:
            blocks.append(
                f"Host {alias_prefix}{host.name}\n"
                f"    HostName {host.address}\n"
                f"    Port {host.port}\n"
                f"    User {self.user}\n"
                f"    IdentityFile {self.user_key}\n"
                f"    UserKnownHostsFile {self.known_hosts}\n"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(blocks))
        return path

    def ssh_argv(self, host: SSHTestHost, *command: str) -> list[str]:
        """An `ssh` client command line that runs `command` on `host` (strict host keys)."""
        return [
            "ssh", "-i", str(self.user_key), "-p", str(host.port),
            "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=5", f"{self.user}@{host.address}", *command,
        ]  # fmt: skip

    def unreachable_address(self) -> tuple[str, int]:
        """An address and port inside our own test range where nothing listens (refused)."""
        if self.isolated and self.hosts:
            return self.hosts[0].address, 9  # inside host1's namespace; port 9 has no listener
        return "127.0.0.1", _free_port()


@contextlib.contextmanager
def ssh_test_hosts(count: int = 3, base_dir: Path | None = None) -> Iterator[SSHTestHosts]:
    """`with ssh_test_hosts(3, tmp) as hosts:` — started hosts, always torn down."""
    hosts = SSHTestHosts(count, base_dir)
    with hosts:
        yield hosts
