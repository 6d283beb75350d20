"""The local transport: programs on this machine with subprocess, files copied in place.

Used for `connection: local` hosts (orch runs on the GPU host itself) and as the login side of
transports that wrap another command (a scheduler's launcher).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.config.host import Host
from orchestrator.errors import ConnectionFailure, ExecutionError
from orchestrator.execute.transport.base import (
    EOF_GRACE_SECONDS,
    POLL_SECONDS,
    CommandTimeout,
    Connection,
    LineSplitter,
    RunResult,
    relative_to_home,
)

_KILL_GRACE_SECONDS = 2.0  # local timeout: SIGTERM, then SIGKILL after this


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
        out, err = LineSplitter(on_stdout_line), LineSplitter(None)
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
                    proc.wait(timeout=POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if stop is not None and stop.is_set():
                    _close_pipe(proc.stdin, stdin_lock)
                if self._closed:
                    break  # closed under it: the program got EOF on stdin and ends its own way
                if deadline is not None and time.monotonic() > deadline:
                    timed_out = True
                    _kill_group(proc)
                    break
        finally:
            with self._lock:
                self._running.discard(proc)
        if proc.returncode is not None or not self._closed:
            for thread in readers:
                thread.join(timeout=EOF_GRACE_SECONDS)  # a backgrounded child may hold the pipes
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
        _atomic_copy(Path(local), self.home / relative_to_home(remote))

    def get(self, remote: str, local: Path) -> None:
        """See `Connection.get`."""
        source = self.home / relative_to_home(remote)
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


def _pump(stream: Any, sink: LineSplitter) -> None:
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
