"""Connections to hosts: run a program (argv, stdin, streamed stdout), put a file, get a file.

Two kinds behind one interface: `LocalConnection` (subprocess) and `SSHConnection` (Fabric for
configuration and connecting, paramiko channels for commands). `connect(host)` picks one.

Why `SSHConnection.run` drives paramiko channels directly instead of Fabric's `run()`: orch
needs to send a stdin payload and keep stdin open (the runner reads EOF as "controller gone"),
stream stdout line by line while the command runs, and stop on an event. Fabric's runner is
built around a terminal and `in_stream`, and a timeout there only closes the local side.

Host keys (REFERENCE.md): Fabric auto-adds unknown keys and never loads known_hosts; here the
system, user, ssh-config and inventory known_hosts files are loaded and unknown or changed keys
are refused (`HostKeyError`, never retried) unless the inventory sets `host_key_checking: false`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import secrets
import select
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fabric
import paramiko
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from orchestrator.config.host import Host
from orchestrator.errors import ConnectionFailure, ExecutionError, HostKeyError, OrchError

log = logging.getLogger(__name__)


def _quiet_prefetch_deaths(previous: Callable[[threading.ExceptHookArgs], Any]) -> None:
    """Keep paramiko's SFTP prefetch thread from printing a traceback when its link closes.

    A get cut by a closed or dropped connection (a second Ctrl-C closes every link) raises in
    the caller, which reports it; the prefetch thread dies of the same cause and would spill
    "Exception in thread ... (_prefetch_thread)" over the terminal. Other exceptions pass on.
    """

    def hook(args: threading.ExceptHookArgs) -> None:
        tb, prefetch = args.exc_traceback, False
        while tb is not None:
            code = tb.tb_frame.f_code
            prefetch |= code.co_name == "_prefetch_thread" and "paramiko" in code.co_filename
            tb = tb.tb_next
        lost = isinstance(args.exc_value, OSError | EOFError | paramiko.SSHException)
        if not (prefetch and lost):
            previous(args)

    threading.excepthook = hook


_quiet_prefetch_deaths(threading.excepthook)

SYSTEM_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
USER_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
_POLL_SECONDS = 0.1  # how often a waiting run() checks `stop` and its deadline
_EOF_GRACE_SECONDS = 1.0  # after exit status: how long to wait for a backgrounded child's output
_KILL_GRACE_SECONDS = 2.0  # local timeout: SIGTERM, then SIGKILL after this

_TOKEN_VAR = "ORCH_COMMAND_TOKEN"  # set on commands with a timeout: finds their processes
# Runs on the host under its python (3.8+, stdlib): TERM the tagged processes, KILL leftovers.
_KILL_TAGGED_SCRIPT = """
import os, signal, sys, time
needle = sys.argv[1].encode()
def tagged():
    found = []
    for name in os.listdir('/proc'):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open('/proc/%s/environ' % name, 'rb') as f:
                    if needle in f.read().split(b'\\0'):
                        found.append(int(name))
            except OSError:
                pass
    return found
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pid in tagged():
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    deadline = time.time() + 2
    while tagged() and time.time() < deadline:
        time.sleep(0.05)
"""


@dataclass(frozen=True)
class RunResult:
    """What a finished command gave: exit code, whole stdout and stderr, wall seconds.

    `rc` is negative when a signal ended the program: -N locally (subprocess's convention),
    -1 over SSH (sshd reports `exit-signal`, which paramiko does not parse).
    """

    rc: int
    stdout: str
    stderr: str
    seconds: float


class CommandTimeout(ExecutionError):
    """A command ran past its timeout and was stopped; `result` holds its output so far."""

    def __init__(self, message: str, *, result: RunResult) -> None:
        super().__init__(message)
        self.result = result


class _LineSplitter:
    """Collects a byte stream; hands each complete line (no newline) to a callback."""

    def __init__(self, on_line: Callable[[str], None] | None) -> None:
        self.on_line = on_line
        self.chunks: list[bytes] = []
        self._partial = b""

    def feed(self, data: bytes) -> None:
        self.chunks.append(data)
        if self.on_line is None:
            return
        self._partial += data
        *lines, self._partial = self._partial.split(b"\n")
        for line in lines:
            self.on_line(line.decode("utf-8", "replace"))

    def finish(self) -> str:
        if self.on_line is not None and self._partial:
            self.on_line(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        return b"".join(self.chunks).decode("utf-8", "replace")


def _relative_to_home(remote: str) -> str:
    """`~/x` and `x` both mean `x` under $HOME; absolute paths stay absolute."""
    if remote == "~":
        return "."
    if remote.startswith("~/"):
        return remote[2:]
    return remote


class Connection(ABC):
    """A way to run programs and move files on one host. Safe to use from several threads."""

    host: Host
    host_key_verified: bool = True  # False only when host key checking was turned off

    @abstractmethod
    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        keep_stdin_open: bool = False,
        timeout: float | None = None,
        on_stdout_line: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """Run `argv` (no shell; cwd $HOME) and wait for it to exit.

        `stdin` is sent first; stdin is then closed, unless `keep_stdin_open`: then the program
        reads EOF only when `stop` is set, the connection is closed, or this process dies.
        Setting `stop` closes stdin and keeps waiting for the exit, up to `timeout`.
        stdout lines go to `on_stdout_line` as they arrive; the whole output is also returned.

        Raises `CommandTimeout` (with the partial output) when `timeout` seconds pass: the local
        process group is killed / over SSH, every remote process of the command is sent TERM,
        then KILL, and the channel closed.
        Raises `ConnectionFailure` when the connection is lost or closed while it runs.
        """

    @abstractmethod
    def put(self, local: Path, remote: str) -> None:
        """Copy a local file to `remote` (relative to $HOME unless absolute), creating parent
        directories; atomic: written to a temporary name, then renamed. Keeps the file mode."""

    @abstractmethod
    def get(self, remote: str, local: Path) -> None:
        """Copy the file `remote` (relative to $HOME unless absolute) to `local`, creating
        parent directories; atomic on the local side."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection; commands still running see EOF on stdin."""

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- local -----------------------------------------------------------------------------------


class LocalConnection(Connection):
    """Runs programs on this machine with subprocess: cwd $HOME, own process group, no shell."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.host_key_verified = True
        self.home = Path.home()
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        keep_stdin_open: bool = False,
        timeout: float | None = None,
        on_stdout_line: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """See `Connection.run`."""
        if self._closed:
            raise ConnectionFailure(f"connection to {self.host.name} is closed")
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=self.home,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # a timeout kills the whole group, not just the leader
            )
        except OSError as exc:
            raise ExecutionError(
                f"cannot start {shlex.join(argv)} on {self.host.name}: {exc}"
            ) from exc
        with self._lock:
            self._running.add(proc)
        out, err = _LineSplitter(on_stdout_line), _LineSplitter(None)
        assert proc.stdin and proc.stdout and proc.stderr
        readers = [
            threading.Thread(target=_pump, args=(proc.stdout, out), daemon=True),
            threading.Thread(target=_pump, args=(proc.stderr, err), daemon=True),
        ]
        stdin_lock = threading.Lock()
        writer = threading.Thread(
            target=_feed_stdin,
            args=(proc.stdin, stdin or b"", not keep_stdin_open, stdin_lock),
            daemon=True,
        )
        for thread in [*readers, writer]:
            thread.start()
        timed_out = False
        try:
            while True:
                try:
                    proc.wait(timeout=_POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if stop is not None and stop.is_set():
                    _close_pipe(proc.stdin, stdin_lock)
                if deadline is not None and time.monotonic() > deadline:
                    timed_out = True
                    _kill_group(proc)
                    break
        finally:
            with self._lock:
                self._running.discard(proc)
        for thread in readers:
            thread.join(timeout=_EOF_GRACE_SECONDS)  # a backgrounded child may hold the pipes
        _close_pipe(proc.stdin, stdin_lock)
        result = RunResult(
            rc=proc.returncode if proc.returncode is not None else -1,
            stdout=out.finish(),
            stderr=err.finish(),
            seconds=time.monotonic() - started,
        )
        if timed_out:
            raise CommandTimeout(
                f"{shlex.join(argv)} on {self.host.name} timed out after {timeout:g} s "
                "(process group killed)",
                result=result,
            )
        if self._closed:
            raise ConnectionFailure(
                f"connection to {self.host.name} was closed while {argv[0]} ran"
            )
        return result

    def put(self, local: Path, remote: str) -> None:
        """See `Connection.put`."""
        _atomic_copy(Path(local), self.home / _relative_to_home(remote))

    def get(self, remote: str, local: Path) -> None:
        """See `Connection.get`."""
        source = self.home / _relative_to_home(remote)
        if not source.is_file():
            raise ExecutionError(f"{remote} not found on {self.host.name}")
        _atomic_copy(source, Path(local))

    def close(self) -> None:
        """Close stdin of every running command (as if the controller had gone)."""
        self._closed = True
        with self._lock:
            running = list(self._running)
        for proc in running:
            if proc.stdin is not None:
                with contextlib.suppress(OSError, ValueError):
                    proc.stdin.close()


def _pump(stream: Any, sink: _LineSplitter) -> None:
    """Read a pipe until EOF into a line splitter (in a thread)."""
    fd = stream.fileno()
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            return
        if not data:
            return
        sink.feed(data)


def _feed_stdin(pipe: Any, payload: bytes, close_after: bool, lock: threading.Lock) -> None:
    """Write the stdin payload; close stdin afterwards unless it must stay open."""
    try:
        if payload:
            pipe.write(payload)
            pipe.flush()
    except (OSError, ValueError):
        return  # the program exited or stdin was closed under us: nothing more to send
    if close_after:
        _close_pipe(pipe, lock)


def _close_pipe(pipe: Any, lock: threading.Lock) -> None:
    with lock, contextlib.suppress(OSError, ValueError):
        pipe.close()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it after a grace period."""
    for sig, grace in ((signal.SIGTERM, _KILL_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _atomic_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{secrets.token_hex(4)}")
    try:
        shutil.copy2(source, tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# -- ssh -------------------------------------------------------------------------------------


class _UnknownHostKey(Exception):
    """Raised by the missing-key policy; turned into HostKeyError by `connect`."""

    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname = hostname
        self.key = key


class _RejectUnknownKey(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: Any) -> None:
        raise _UnknownHostKey(hostname, key)


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


class SSHConnection(Connection):
    """One SSH connection to a host, reused for every command and transfer of a run.

    Channel opens and SFTP use are serialised per connection (paramiko's `open()` and a shared
    SFTP client are not thread-safe); commands themselves run concurrently on their channels.
    """

    def __init__(self, host: Host, fabric_connection: fabric.Connection, verified: bool) -> None:
        self.host = host
        self.host_key_verified = verified
        self._fabric = fabric_connection
        self.address = f"{fabric_connection.host}:{fabric_connection.port}"
        transport = fabric_connection.client.get_transport()
        if transport is None:
            raise ConnectionFailure(f"connection to {host.name} has no transport")
        self._transport: paramiko.Transport = transport
        self._open_lock = threading.Lock()
        self._sftp_lock = threading.Lock()
        self._sftp: paramiko.SFTPClient | None = None
        self._closed = False
        self.channel_timeout = 30.0

    def _open_channel(self) -> paramiko.Channel:
        if self._closed or not self._transport.is_active():
            raise ConnectionFailure(f"connection to {self.host.name} ({self.address}) is closed")
        try:
            with self._open_lock:
                return self._transport.open_session(timeout=self.channel_timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionFailure(
                f"cannot open a session on {self.host.name} ({self.address}): {exc}"
            ) from exc

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        keep_stdin_open: bool = False,
        timeout: float | None = None,
        on_stdout_line: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """See `Connection.run`. argv is quoted with `shlex.join` for the remote login shell.

        With a timeout the command runs as `env ORCH_COMMAND_TOKEN=<random> argv...`; on
        timeout the session gets a `signal` request (sshd honours it only for non-root users),
        the channel is closed, and a second command TERMs, then KILLs, every process on the host
        whose environment carries the token (descendants too, unless they scrubbed it).
        """
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        command = shlex.join(argv)
        token = secrets.token_hex(8)
        if timeout is not None and "=" not in argv[0]:  # env would read NAME=VALUE as a var
            # tag the process tree, so a timeout can find and end it (sshd won't signal root's)
            command = shlex.join(["env", f"{_TOKEN_VAR}={token}", *argv])
        channel = self._open_channel()
        out, err = _LineSplitter(on_stdout_line), _LineSplitter(None)
        stdin_lock = threading.Lock()
        stdin_state = {"closed": False}

        def close_stdin() -> None:
            with stdin_lock:
                if not stdin_state["closed"]:
                    stdin_state["closed"] = True
                    with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                        channel.shutdown_write()

        def send_stdin() -> None:
            try:
                if stdin:
                    channel.sendall(stdin)
            except (OSError, EOFError, paramiko.SSHException):
                return  # the channel closed: the loop below reports why
            if not keep_stdin_open:
                close_stdin()

        try:
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            channel.close()
            raise ConnectionFailure(
                f"cannot start {command} on {self.host.name} ({self.address}): {exc}"
            ) from exc
        writer = threading.Thread(target=send_stdin, daemon=True)
        writer.start()
        exited_at: float | None = None
        timed_out = False
        try:
            while True:
                if channel.eof_received:  # no more data: wake on the exit status, not the pipe
                    channel.status_event.wait(_POLL_SECONDS)
                else:
                    with contextlib.suppress(OSError, ValueError):
                        select.select([channel], [], [], _POLL_SECONDS)
                _drain(channel, out, err)
                if _has_exit_status(channel):
                    exited_at = exited_at or time.monotonic()
                    done = channel.eof_received or channel.closed
                    if done or time.monotonic() - exited_at > _EOF_GRACE_SECONDS:
                        _drain(channel, out, err)
                        break
                elif channel.closed:
                    _drain(channel, out, err)
                    break  # no exit status: killed by a signal, or the connection died
                if stop is not None and stop.is_set():
                    close_stdin()
                if deadline is not None and time.monotonic() > deadline:
                    timed_out = True
                    _send_signal(channel, "TERM")
                    break
        finally:
            channel.close()
        if timed_out:
            self._kill_tagged(token)
        result = RunResult(
            rc=channel.exit_status if _has_exit_status(channel) else -1,
            stdout=out.finish(),
            stderr=err.finish(),
            seconds=time.monotonic() - started,
        )
        if timed_out:
            raise CommandTimeout(
                f"{shlex.join(argv)} on {self.host.name} timed out after {timeout:g} s "
                "(its processes were sent TERM, then KILL)",
                result=result,
            )
        if not _has_exit_status(channel) and (self._closed or not self._transport.is_active()):
            why = "was closed" if self._closed else "was lost"
            raise ConnectionFailure(
                f"connection to {self.host.name} ({self.address}) {why} while {argv[0]} ran"
            )
        return result

    def _kill_tagged(self, token: str) -> None:
        """TERM, then KILL, every remote process that carries this command's token; best effort."""
        with contextlib.suppress(OrchError):
            self.run([self.host.python, "-c", _KILL_TAGGED_SCRIPT, f"{_TOKEN_VAR}={token}"])

    @contextlib.contextmanager
    def _sftp_client(self) -> Iterator[paramiko.SFTPClient]:
        with self._sftp_lock:
            if self._sftp is None:
                if self._closed or not self._transport.is_active():
                    raise ConnectionFailure(f"connection to {self.host.name} is closed")
                with self._open_lock:
                    self._sftp = paramiko.SFTPClient.from_transport(self._transport)
                if self._sftp is None:
                    raise ConnectionFailure(f"cannot open SFTP on {self.host.name}")
            yield self._sftp

    def put(self, local: Path, remote: str) -> None:
        """See `Connection.put`."""
        path = _relative_to_home(remote)
        parent, name = posixpath.split(path)
        tmp = posixpath.join(parent, f".{name}.tmp-{secrets.token_hex(4)}")
        try:
            with self._sftp_client() as sftp:
                _sftp_makedirs(sftp, parent)
                sftp.put(str(local), tmp)
                sftp.chmod(tmp, Path(local).stat().st_mode & 0o7777)
                sftp.posix_rename(tmp, path)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            with contextlib.suppress(Exception), self._sftp_client() as sftp:
                sftp.remove(tmp)
            message = f"cannot put {local} to {self.host.name}:{remote}: {exc}"
            if self._lost():
                raise ConnectionFailure(message) from exc
            raise ExecutionError(message) from exc

    def get(self, remote: str, local: Path) -> None:
        """See `Connection.get`."""
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.tmp-{secrets.token_hex(4)}")
        try:
            with self._sftp_client() as sftp:
                sftp.get(_relative_to_home(remote), str(tmp))
            os.replace(tmp, local)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            tmp.unlink(missing_ok=True)
            message = f"cannot get {self.host.name}:{remote}: {exc}"
            if self._lost():  # the link went, not the file: the caller may reconnect
                raise ConnectionFailure(message) from exc
            raise ExecutionError(message) from exc

    def _lost(self) -> bool:
        """True when this connection was closed, its transport died or its SFTP channel did.

        paramiko closes the channels before it marks a dying transport inactive, so a cut
        SFTP channel is the first sign of a dropped link. A dead SFTP client is dropped here:
        the next transfer opens a new one when the transport still lives.
        """
        with self._sftp_lock:
            sftp_dead = self._sftp is not None and self._sftp.sock.closed
            if sftp_dead:
                self._sftp = None
        return sftp_dead or self._closed or not self._transport.is_active()

    def close(self) -> None:
        """Close SFTP and the connection; running commands' remote stdin sees EOF."""
        self._closed = True
        with contextlib.suppress(Exception):
            self._fabric.close()
        with contextlib.suppress(Exception):
            self._transport.close()


def _has_exit_status(channel: paramiko.Channel) -> bool:
    # paramiko's exit_status_ready() is also true when the channel merely closed
    return channel.status_event.is_set() and channel.exit_status != -1


def _drain(channel: paramiko.Channel, out: _LineSplitter, err: _LineSplitter) -> None:
    while channel.recv_ready():
        data = channel.recv(65536)
        if not data:
            break
        out.feed(data)
    while channel.recv_stderr_ready():
        data = channel.recv_stderr(65536)
        if not data:
            break
        err.feed(data)


def _send_signal(channel: paramiko.Channel, name: str) -> None:
    """Send an RFC 4254 `signal` request (paramiko has no API for it); best effort."""
    with contextlib.suppress(Exception):
        message = paramiko.Message()
        message.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
        message.add_int(channel.remote_chanid)
        message.add_string("signal")
        message.add_boolean(False)
        message.add_string(name)
        send = getattr(channel.transport, "_send_user_message", None)
        if send is not None:
            send(message)


def _sftp_makedirs(sftp: paramiko.SFTPClient, directory: str) -> None:
    if directory in ("", ".", "/"):
        return
    current = "/" if directory.startswith("/") else ""
    for part in directory.strip("/").split("/"):
        current = posixpath.join(current, part) if current else part
        try:
            sftp.stat(current)
        except FileNotFoundError:
            with contextlib.suppress(OSError):  # a concurrent put may have made it
                sftp.mkdir(current)


# -- connect ---------------------------------------------------------------------------------


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
    """Open a connection to `host`: local for `connection: local`, otherwise SSH.

    SSH honours ssh config (default ~/.ssh/config and /etc/ssh/ssh_config, or
    `ssh_config_path`): Host aliases, HostName, Port, User, IdentityFile, ProxyJump,
    UserKnownHostsFile; inventory values (address, port, user, key) override it.
    Connection errors are retried `attempts` times with exponential backoff and jitter; host
    key and authentication failures are not. Raises `HostKeyError` or `ConnectionFailure`.
    """
    if host.connection == "local":
        return LocalConnection(host)

    def attempt() -> SSHConnection:
        return _open_ssh(host, connect_timeout, keepalive, ssh_config_path)

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
    if isinstance(exc, OrchError | _UnknownHostKey | paramiko.BadHostKeyException):
        return False
    if isinstance(exc, paramiko.AuthenticationException):
        return False
    if isinstance(exc, paramiko.SSHException):
        return "authentication" not in str(exc).lower()
    return isinstance(exc, OSError | EOFError)


def _describe(exc: BaseException) -> str:
    """The last cause in a few words: 'connection refused', 'timed out', ..."""
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


def _where(host: Host, conn: fabric.Connection | None = None) -> str:
    if conn is not None:
        return f"{conn.host}:{conn.port}"
    return f"{host.target}:{host.port or 22}"


def _known_hosts_files(host: Host, ssh_config: Any) -> list[Path]:
    files = [SYSTEM_KNOWN_HOSTS, USER_KNOWN_HOSTS]
    for key in ("globalknownhostsfile", "userknownhostsfile"):
        value = ssh_config.get(key)
        if value:
            files.extend(Path(item) for item in str(value).split())
    if host.known_hosts:
        files.append(Path(host.known_hosts))
    return [path.expanduser() for path in files]


def _prepare_client(conn: fabric.Connection, host: Host, timeout: float) -> None:
    """Host key policy and timeouts on one Fabric connection (the target or a jump host)."""
    client = conn.client
    if host.host_key_checking:
        for path in _known_hosts_files(host, conn.ssh_config):
            if path.is_file():
                client.load_system_host_keys(str(path))
        client.set_missing_host_key_policy(_RejectUnknownKey())
    else:
        client.set_missing_host_key_policy(_AcceptAnyKey())
    # Fabric int()s connect_timeout (0.5 would mean none): pass our float to paramiko instead.
    conn.connect_timeout = None
    conn.connect_kwargs.update(timeout=timeout, banner_timeout=timeout, auth_timeout=timeout)


def _open_ssh(
    host: Host, timeout: float, keepalive: int, ssh_config_path: Path | None
) -> SSHConnection:
    config = (
        fabric.Config(runtime_ssh_path=str(ssh_config_path))
        if ssh_config_path is not None
        else fabric.Config()
    )
    connect_kwargs: dict[str, Any] = {}
    if host.key_file:
        connect_kwargs["key_filename"] = [os.path.expanduser(host.key_file)]
    conn = fabric.Connection(
        host.target,
        user=host.user,
        port=host.port,
        config=config,
        connect_kwargs=connect_kwargs,
    )
    _prepare_client(conn, host, timeout)
    hop = conn.gateway
    while isinstance(hop, fabric.Connection):  # ProxyJump hops get the same key checks
        _prepare_client(hop, host, timeout)
        hop = hop.gateway
    started = time.monotonic()
    try:
        conn.open()
    except _UnknownHostKey as exc:
        conn.close()
        raise HostKeyError(
            f"host key for {host.name} ({_where(host, conn)}) is not in known_hosts: the server "
            f"offers {exc.key.get_name()} {exc.key.fingerprint}",
            hint=f"add it with `ssh-keyscan -p {conn.port} {conn.host} >> ~/.ssh/known_hosts` "
            "(after checking it), or set host_key_checking: false for this host",
        ) from exc
    except paramiko.BadHostKeyException as exc:
        conn.close()
        raise HostKeyError(
            f"host key for {host.name} ({_where(host, conn)}) has CHANGED: the server offers "
            f"{exc.key.get_name()} {exc.key.fingerprint} but known_hosts has "
            f"{exc.expected_key.fingerprint}; this may be a man-in-the-middle attack",
            hint="if the host was reinstalled, remove its old line with "
            f"`ssh-keygen -R {conn.host}` and add the new key",
        ) from exc
    except paramiko.AuthenticationException as exc:
        conn.close()
        raise ConnectionFailure(
            f"authentication to {host.name} ({_where(host, conn)}) as {conn.user} failed: {exc}",
            hint="check ansible_user and ansible_ssh_private_key_file",
        ) from exc
    except Exception as exc:
        # paramiko may report a dead transport as "No existing session": use its real cause
        failed = conn.client.get_transport()
        saved = getattr(failed, "saved_exception", None) if failed is not None else None
        conn.close()
        if isinstance(saved, Exception) and saved is not exc:
            raise saved from exc
        if "No existing session" in str(exc) and time.monotonic() - started >= 0.9 * timeout:
            raise TimeoutError(f"no SSH handshake within {timeout:g} s") from exc
        raise
    transport = conn.client.get_transport()
    if transport is not None:
        transport.set_keepalive(keepalive)
        if isinstance(transport.sock, socket.socket):  # a ProxyJump hop gives a Channel
            # Nagle + delayed ACK cost ~40 ms on every channel open; small packets here
            with contextlib.suppress(OSError):
                transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return SSHConnection(host, conn, verified=host.host_key_checking)
