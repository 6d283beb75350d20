"""The SSH transport: one Fabric-opened connection per host, commands on paramiko channels.

Fabric does configuration and connecting (ssh config, ProxyJump, keys); host keys are checked
by `hostkeys.py`. Why `SSHConnection.run` drives paramiko channels directly instead of Fabric's
`run()`: orch needs to send a stdin payload and keep stdin open (the runner reads EOF as
"controller gone"), stream stdout line by line while the command runs, and stop on an event.
Fabric's runner is built around a terminal and `in_stream`, and a timeout there only closes the
local side. Files move over one shared SFTP client.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import secrets
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import fabric
import paramiko

from orchestrator.config.host import Host
from orchestrator.errors import ConnectionFailure, ExecutionError, OrchError
from orchestrator.execute.transport import hostkeys
from orchestrator.execute.transport.base import (
    EOF_GRACE_SECONDS,
    Connection,
    LineSplitter,
    RunResult,
    relative_to_home,
)
from orchestrator.execute.transport.program import Program, run_program


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
        command = shlex.join(argv)
        token = secrets.token_hex(8)
        if timeout is not None and "=" not in argv[0]:  # env would read NAME=VALUE as a var
            # tag the process tree, so a timeout can find and end it (sshd won't signal root's)
            command = shlex.join(["env", f"{_TOKEN_VAR}={token}", *argv])
        channel = self._open_channel()
        try:
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            channel.close()
            raise ConnectionFailure(
                f"cannot start {command} on {self.host.name} ({self.address}): {exc}"
            ) from exc
        program = _ChannelProgram(self, channel, argv, timeout, on_stdout_line, started, token)
        return run_program(
            program,
            stdin=stdin,
            keep_stdin_open=keep_stdin_open,
            timeout=timeout,
            stop=stop,
            started=started,
        )

    def link_gone(self) -> str | None:
        """Why commands can no longer reach the host ("was closed", "was lost"), else None."""
        if self._closed:
            return "was closed"
        return None if self._transport.is_active() else "was lost"

    def kill_tagged(self, token: str) -> None:
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
        path = relative_to_home(remote)
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
            if self._lost(exc):
                raise ConnectionFailure(message) from exc
            raise ExecutionError(message) from exc

    def get(self, remote: str, local: Path) -> None:
        """See `Connection.get`."""
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.tmp-{secrets.token_hex(4)}")
        try:
            with self._sftp_client() as sftp:
                sftp.get(relative_to_home(remote), str(tmp))
            os.replace(tmp, local)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            tmp.unlink(missing_ok=True)
            message = f"cannot get {self.host.name}:{remote}: {exc}"
            if self._lost(exc):  # the link went, not the file: the caller may reconnect
                raise ConnectionFailure(message) from exc
            raise ExecutionError(message) from exc

    def _lost(self, exc: BaseException) -> bool:
        """True when `exc` came from the link, not the file: this connection was closed, its
        transport died or its SFTP channel did.

        paramiko closes the channels before it marks a dying transport inactive, so a cut
        SFTP channel is the first sign of a dropped link; and a write that fails on the socket
        raises EOFError in this thread before the transport's own thread has noticed anything.
        A dead SFTP client is dropped here: the next transfer opens a new one when the
        transport still lives.
        """
        link_error = isinstance(exc, EOFError | ConnectionError)
        with self._sftp_lock:
            sftp_dead = self._sftp is not None and (link_error or self._sftp.sock.closed)
            if sftp_dead:
                self._sftp = None
        return link_error or sftp_dead or self._closed or not self._transport.is_active()

    def close(self) -> None:
        """Close SFTP and the connection; running commands' remote stdin sees EOF."""
        self._closed = True
        with contextlib.suppress(Exception):
            self._fabric.close()
        with contextlib.suppress(Exception):
            self._transport.close()


class _ChannelProgram(Program):
    """A command on a paramiko channel: output drained as it waits, TERM on a timeout, then
    every process tagged with the command's token killed by a second command."""

    def __init__(
        self,
        conn: SSHConnection,
        channel: paramiko.Channel,
        argv: Sequence[str],
        timeout: float | None,
        on_stdout_line: Callable[[str], None] | None,
        started: float,
        token: str,
    ) -> None:
        super().__init__(conn.host.name, argv, timeout, on_stdout_line, started)
        self.conn, self.channel, self.token = conn, channel, token
        self.exited_at: float | None = None

    def wait(self, seconds: float) -> bool:
        channel = self.channel
        if channel.eof_received:  # no more data: wake on the exit status, not the pipe
            channel.status_event.wait(seconds)
        else:
            with contextlib.suppress(OSError, ValueError):
                select.select([channel], [], [], seconds)
        _drain(channel, self.out, self.err)
        if _has_exit_status(channel):
            self.exited_at = self.exited_at or time.monotonic()
            done = channel.eof_received or channel.closed
            if done or time.monotonic() - self.exited_at > EOF_GRACE_SECONDS:
                _drain(channel, self.out, self.err)
                return True
        elif channel.closed:
            _drain(channel, self.out, self.err)
            return True  # no exit status: killed by a signal, or the connection died
        return False

    def write_stdin(self, data: bytes) -> None:
        self.channel.sendall(data)

    def shut_stdin(self) -> None:
        self.channel.shutdown_write()

    def cut(self) -> bool:
        return False  # a closed connection closes the channel: `wait` sees it

    def terminate(self) -> None:
        _send_signal(self.channel, "TERM")

    def release(self) -> None:
        self.channel.close()

    def finish(self, timed_out: bool) -> RunResult:
        channel, host = self.channel, self.conn.host.name
        if timed_out:
            self.conn.kill_tagged(self.token)
        rc = channel.exit_status if _has_exit_status(channel) else -1
        result = self.result(rc, timed_out, "its processes were sent TERM, then KILL")
        why = None if _has_exit_status(channel) else self.conn.link_gone()
        if why is not None:
            raise ConnectionFailure(
                f"connection to {host} ({self.conn.address}) {why} while {self.argv[0]} ran"
            )
        return result


def _has_exit_status(channel: paramiko.Channel) -> bool:
    # paramiko's exit_status_ready() is also true when the channel merely closed
    return channel.status_event.is_set() and channel.exit_status != -1


def _drain(channel: paramiko.Channel, out: LineSplitter, err: LineSplitter) -> None:
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


# -- opening ---------------------------------------------------------------------------------


def _prepare_client(conn: fabric.Connection, host: Host, timeout: float) -> None:
    """Host key policy and timeouts on one Fabric connection (the target or a jump host)."""
    hostkeys.apply_policy(conn.client, host, conn.ssh_config)
    # Fabric int()s connect_timeout (0.5 would mean none): pass our float to paramiko instead.
    conn.connect_timeout = None
    conn.connect_kwargs.update(timeout=timeout, banner_timeout=timeout, auth_timeout=timeout)


def open_ssh(
    host: Host, timeout: float, keepalive: int, ssh_config_path: Path | None
) -> SSHConnection:
    """One attempt to connect to `host` over SSH, honouring ssh config (or `ssh_config_path`).

    Raises `HostKeyError` for a refused key, `ConnectionFailure` for failed authentication,
    and the network's own exception (OSError, paramiko.SSHException, ...) otherwise, for the
    caller's retry policy to judge.
    """
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
    except Exception as exc:
        # paramiko may report a dead transport as "No existing session": use its real cause
        failed = conn.client.get_transport()
        saved = getattr(failed, "saved_exception", None) if failed is not None else None
        conn.close()
        if hostkeys.is_refusal(exc):
            raise hostkeys.refusal(exc, host, conn.host, conn.port) from exc
        if isinstance(exc, paramiko.AuthenticationException):
            raise ConnectionFailure(
                f"authentication to {host.name} ({conn.host}:{conn.port}) as {conn.user} "
                f"failed: {exc}",
                hint="check ansible_user and ansible_ssh_private_key_file",
            ) from exc
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
