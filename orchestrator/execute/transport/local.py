"""The local transport: programs on this machine with subprocess, files copied in place.

Used for `connection: local` hosts (orch runs on the GPU host itself) and as the login side of
transports that wrap another command (a scheduler's launcher).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
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
    Connection,
    LineSplitter,
    RunResult,
    relative_to_home,
)
from orchestrator.execute.transport.program import Program, run_program

_KILL_GRACE_SECONDS = 2.0  # local timeout: SIGTERM, then SIGKILL after this


class LocalConnection(Connection):
    """Runs programs on this machine with subprocess: cwd $HOME, own process group, no shell."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.host_key_verified = True
        self.home = Path.home()
        self._lock = threading.Lock()
        self._running: set[_LocalProgram] = set()
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
        program = _LocalProgram(self, proc, argv, timeout, on_stdout_line, started)
        with self._lock:
            self._running.add(program)
        return run_program(
            program,
            stdin=stdin,
            keep_stdin_open=keep_stdin_open,
            timeout=timeout,
            stop=stop,
            started=started,
        )

    def put(self, local: Path, remote: str) -> None:
        """See `Connection.put`."""
        _atomic_copy(Path(local), self.home / relative_to_home(remote))

    def get(self, remote: str, local: Path) -> None:
        """See `Connection.get`."""
        source = self.home / relative_to_home(remote)
        if not source.is_file():
            raise ExecutionError(f"{remote} not found on {self.host.name}")
        _atomic_copy(source, Path(local))

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    def forget(self, program: _LocalProgram) -> None:
        """`program` has been waited for: `close` no longer reaches it."""
        with self._lock:
            self._running.discard(program)

    def close(self) -> None:
        """Close stdin of every running command (as if the controller had gone)."""
        self._closed = True
        with self._lock:
            running = list(self._running)
        for program in running:
            program.close_stdin()


class _Reader(threading.Thread):
    """Reads a pipe until EOF into a line splitter; says whether it is handling what it read
    (the stdout callback may import a whole cell) or waiting for more."""

    def __init__(self, stream: Any, sink: LineSplitter) -> None:
        super().__init__(daemon=True)
        self.fd, self.sink = stream.fileno(), sink
        self.handling = False

    def run(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            self.handling = True
            try:
                self.sink.feed(data)
            finally:
                self.handling = False

    def finish(self, grace: float) -> None:
        """Wait for EOF: as long as it handles lines already read (each must be handled before
        the run ends), and `grace` seconds for more (a backgrounded child may hold the pipe)."""
        deadline = time.monotonic() + grace
        while self.is_alive():
            self.join(0.05)
            if not self.handling and time.monotonic() > deadline:
                return


class _LocalProgram(Program):
    """A subprocess: its pipes read by two threads, its group killed on a timeout."""

    def __init__(
        self,
        conn: LocalConnection,
        proc: subprocess.Popen[bytes],
        argv: Sequence[str],
        timeout: float | None,
        on_stdout_line: Callable[[str], None] | None,
        started: float,
    ) -> None:
        super().__init__(conn.host.name, argv, timeout, on_stdout_line, started)
        self.conn, self.proc = conn, proc
        self._pipe_lock = threading.Lock()  # held only around non-blocking writes and the close
        self._pipe_closed = False
        assert proc.stdin and proc.stdout and proc.stderr
        self.readers = [_Reader(proc.stdout, self.out), _Reader(proc.stderr, self.err)]
        for thread in self.readers:
            thread.start()

    def wait(self, seconds: float) -> bool:
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def write_stdin(self, data: bytes) -> None:
        # Non-blocking writes on the pipe's fd, a piece at a time: a program that reads no
        # stdin (srun while its job waits in the queue) must never hold up closing it.
        assert self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        os.set_blocking(fd, False)
        view = memoryview(data)
        while view:
            with self._pipe_lock:
                if self._pipe_closed:
                    return
                try:
                    view = view[os.write(fd, view[:65536]) :]
                    continue
                except BlockingIOError:
                    pass
            with contextlib.suppress(OSError, ValueError):  # closed meanwhile: seen above
                select.select([], [fd], [], POLL_SECONDS)

    def shut_stdin(self) -> None:
        assert self.proc.stdin is not None
        with self._pipe_lock:
            self._pipe_closed = True
            self.proc.stdin.close()

    def cut(self) -> bool:
        return self.conn.closed

    def terminate(self) -> None:
        _kill_group(self.proc)

    def release(self) -> None:
        self.conn.forget(self)

    def finish(self, timed_out: bool) -> RunResult:
        proc, host = self.proc, self.conn.host.name
        if proc.returncode is not None or not self.conn.closed:
            for reader in self.readers:
                reader.finish(EOF_GRACE_SECONDS)
        self.close_stdin()
        rc = proc.returncode if proc.returncode is not None else -1
        result = self.result(rc, timed_out, "process group killed")
        if self.conn.closed:
            raise ConnectionFailure(f"connection to {host} was closed while {self.argv[0]} ran")
        return result


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
