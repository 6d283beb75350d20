"""A started program as every transport drives it: the wait loop, written once.

A transport starts its program its own way (a subprocess, an SSH channel) and hands over a
`Program`: its primitives (wait a moment for the end, write and close stdin, end it, say what it
gave). `run_program` does the rest alike for all: stdin fed from a thread, a stop request closes
stdin (the runner's "controller gone"), a closed connection ends the wait, the deadline ends the
program. Invoke's `Runner` and Fabric's `Remote` split the same way.
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from orchestrator.execute.transport.base import (
    POLL_SECONDS,
    CommandTimeout,
    LineSplitter,
    RunResult,
)


class Program(ABC):
    """One started program of a transport."""

    def __init__(
        self,
        host: str,
        argv: Sequence[str],
        timeout: float | None,
        on_stdout_line: Callable[[str], None] | None,
        started: float,
    ) -> None:
        self.host, self.argv, self.timeout, self.started = host, argv, timeout, started
        self.out, self.err = LineSplitter(on_stdout_line), LineSplitter(None)
        self._stdin_lock = threading.Lock()
        self._stdin_closed = False

    def result(self, rc: int, timed_out: bool, ended_how: str) -> RunResult:
        """What the program gave; `CommandTimeout` (saying how it was ended) when it timed out."""
        result = RunResult(
            rc=rc,
            stdout=self.out.finish(),
            stderr=self.err.finish(),
            seconds=time.monotonic() - self.started,
        )
        if timed_out:
            raise CommandTimeout(
                f"{shlex.join(self.argv)} on {self.host} timed out after {self.timeout:g} s "
                f"({ended_how})",
                result=result,
            )
        return result

    @abstractmethod
    def wait(self, seconds: float) -> bool:
        """Up to `seconds` for the end: True once the program has ended and its output is read
        (or the transport gave up waiting for the rest of it)."""

    @abstractmethod
    def write_stdin(self, data: bytes) -> None:
        """Send `data` to the program's stdin; OSError (or the transport's own) when it is gone."""

    @abstractmethod
    def shut_stdin(self) -> None:
        """Close the program's stdin (once, from `close_stdin`)."""

    @abstractmethod
    def cut(self) -> bool:
        """True when the connection under the program was closed: stop waiting for it."""

    @abstractmethod
    def terminate(self) -> None:
        """The deadline passed: end the program and what it started."""

    @abstractmethod
    def release(self) -> None:
        """The wait is over, however it ended: let go of what the transport holds for it."""

    @abstractmethod
    def finish(self, timed_out: bool) -> RunResult:
        """What the program gave; raises `CommandTimeout` when it timed out and
        `ConnectionFailure` when the connection went before it ended."""

    def close_stdin(self) -> None:
        """Close stdin once, whichever of the feeder, a stop or the end asks first."""
        with self._stdin_lock:
            if self._stdin_closed:
                return
            self._stdin_closed = True
        with contextlib.suppress(Exception):  # already gone with the program or the link
            self.shut_stdin()

    def feed(self, payload: bytes, keep_open: bool) -> None:
        """Write the stdin payload (in a thread); close stdin after it unless it must stay open."""
        try:
            if payload:
                self.write_stdin(payload)
        except Exception:  # the program ended or stdin was closed under us: nothing more to send
            return
        if not keep_open:
            self.close_stdin()


def run_program(
    program: Program,
    *,
    stdin: bytes | None,
    keep_stdin_open: bool,
    timeout: float | None,
    stop: threading.Event | None,
    started: float,
) -> RunResult:
    """Drive `program` to its end, as `Connection.run` promises (see there)."""
    deadline = None if timeout is None else started + timeout
    writer = threading.Thread(
        target=program.feed, args=(stdin or b"", keep_stdin_open), name="stdin", daemon=True
    )
    writer.start()
    timed_out = False
    try:
        while not program.wait(POLL_SECONDS):
            if stop is not None and stop.is_set():
                program.close_stdin()
            if program.cut():
                break  # closed under it: the program got EOF on stdin and ends its own way
            if deadline is not None and time.monotonic() > deadline:
                timed_out = True
                program.terminate()
                break
    finally:
        program.release()
    return program.finish(timed_out)
