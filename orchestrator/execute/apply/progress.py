"""Live progress of a run: one line per host on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from orchestrator.execute.apply.eta import (
    CellTimes,
    eta_text,
    host_seconds_left,
    run_seconds_left,
    span,
)
from orchestrator.results.records import reset_answer
from orchestrator.results.terminal import printable

# How a repeats rule's stop reads in the log.
STOPS = {"settled": "settled", "decided": "decided", "max": "reached its max"}


@dataclass
class HostLine:
    """What one host is doing now."""

    total: int
    done: int = 0
    failed: int = 0
    cell: str = ""
    step: str = "connecting"
    started: float = field(default_factory=time.monotonic)
    starts: dict[str, bool] = field(default_factory=dict)  # planned cells: starts a server?
    begun: dict[str, float] = field(default_factory=dict)  # cell -> when its first event came
    finished: set[str] = field(default_factory=set)
    times: CellTimes = field(default_factory=CellTimes)


class Progress:
    """Receives controller and runner events; renders them live or as log lines.

    Thread-safe: hosts report from their own threads.
    """

    def __init__(
        self,
        hosts: dict[str, int],
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        eta_every: int = 5,
    ) -> None:
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()
        self._clock = clock
        self._started = clock()
        self._lines = {h: HostLine(total=n, started=self._started) for h, n in hosts.items()}
        self._pooled = CellTimes()
        self._max_parallel = max(1, len(hosts))
        self._eta_every = eta_every
        self._done = 0
        self._live: Live | None = None
        if self._stream.isatty():
            self._live = Live(
                self._table(), console=Console(file=self._stream), refresh_per_second=4
            )

    def __enter__(self) -> Progress:
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(exc_type, exc, tb)

    def plan(self, queues: dict[str, Sequence[tuple[str, bool]]], max_parallel: int) -> None:
        """The cells each host will run, in order, each with whether it starts a server (the
        first of its session): what the ETA costs. `max_parallel` hosts run at once. A host's
        cells not queued were finished by an earlier run (`--resume`): they count as done."""
        with self._lock:
            for host, cells in queues.items():
                line = self._lines.setdefault(host, HostLine(total=len(cells)))
                line.starts.update(cells)
                line.done = max(line.done, line.total - len(cells))
            for host, line in self._lines.items():
                if host not in queues:  # every cell of it finished earlier
                    line.done = line.total
            self._max_parallel = max(1, max_parallel)

    def _host_left(self, line: HostLine, now: float) -> float | None:
        running = [
            (line.starts[c], now - t) for c, t in line.begun.items() if c not in line.finished
        ]
        left = [s for c, s in line.starts.items() if c not in line.finished and c not in line.begun]
        return host_seconds_left(left, running, line.times, self._pooled)

    def _run_left(self, now: float) -> float | None:
        hosts = [self._host_left(line, now) for line in self._lines.values()]
        return run_seconds_left(hosts, self._max_parallel)

    def _table(self) -> Table:
        now = self._clock()
        table = Table(show_header=True, header_style="bold", box=None)
        for col in ("host", "cells", "failed", "now", "step", "elapsed", "eta"):
            table.add_column(col)
        for host, line in self._lines.items():
            left = self._host_left(line, now)
            table.add_row(
                host,
                f"{line.done}/{line.total}",
                str(line.failed) if line.failed else "",
                line.cell,
                line.step,
                span(now - line.started),
                "" if left is None else span(left),
            )
        if len(self._lines) > 1:
            done = sum(line.done for line in self._lines.values())
            failed = sum(line.failed for line in self._lines.values())
            total = sum(line.total for line in self._lines.values())
            left = self._run_left(now)
            table.add_row(
                "run",
                f"{done}/{total}",
                str(failed) if failed else "",
                "",
                "",
                span(now - self._started),
                "" if left is None else eta_text(left),
            )
        return table

    def _say(self, text: str) -> None:
        text = printable(text)  # a host's words: never an escape sequence on this terminal
        if self._live is None:
            print(text, file=self._stream, flush=True)
        else:
            self._live.update(self._table())

    def _warn(self, text: str) -> None:
        """A line that must stay in sight: above the live table on a terminal, else as _say."""
        text = printable(text)
        if self._live is None:
            print(text, file=self._stream, flush=True)
        else:
            self._live.console.print(text, markup=False, highlight=False)
            self._live.update(self._table())

    def host_step(self, host: str, step: str) -> None:
        """A host-level step: connecting, shipping the runner, facts, collecting."""
        with self._lock:
            self._lines[host].step = step
            self._say(f"[{host}] {step}")

    def cell_event(self, host: str, cell_id: str, event: dict[str, Any]) -> None:
        """One event line from the runner."""
        kind = event.get("event")
        with self._lock:
            line = self._lines[host]
            line.cell = cell_id
            if cell_id in line.starts:
                line.begun.setdefault(cell_id, self._clock())
            if kind == "step":
                line.step = printable(f"{event.get('step')} {event.get('status')}")
                if event.get("status") in ("start", "skipped"):
                    return  # the 'ok'/'failed' line says enough in plain logs
                detail = event.get("detail")
                warning = detail.get("warning") if isinstance(detail, dict) else None
                if warning:  # passed, yet not as clean as "ok" alone would say
                    line.step = f"{event.get('step')} WARNING"
                    self._warn(f"[{host}] {cell_id}: {event.get('step')} WARNING: {warning}")
                    return
                self._say(f"[{host}] {cell_id}: {line.step}")
            elif kind == "warning":
                self._warn(f"[{host}] {cell_id}: WARNING: {warning_text(event)}")
            elif kind == "repeat":
                line.step = printable(f"bench {event.get('kind')} {event.get('n')}")
                self._say(
                    f"[{host}] {cell_id}: {line.step} rc={event.get('rc')} "
                    f"{float(event.get('seconds') or 0):.1f}s"
                )
            elif kind == "repeats":  # a repeats rule stopped the bench (runner/repeat_rule.py)
                why = STOPS.get(str(event.get("stopped")), printable(str(event.get("stopped"))))
                self._say(f"[{host}] {cell_id}: bench {why} after {event.get('ran')} repeats")

    def cell_done(self, host: str, cell_id: str, status: str, reason: str | None) -> None:
        """A cell finished (passed, failed, interrupted, skipped)."""
        with self._lock:
            line = self._lines[host]
            line.done += 1
            if status != "passed":
                line.failed += 1
            line.step = status
            now = self._clock()
            began = line.begun.get(cell_id)
            if began is not None and cell_id not in line.finished:
                line.times.add(line.starts[cell_id], now - began)
                self._pooled.add(line.starts[cell_id], now - began)
            line.finished.add(cell_id)
            tail = f": {reason.splitlines()[0]}" if reason else ""
            self._say(f"[{host}] {cell_id}: {status.upper()}{tail}")
            self._done += 1
            if self._live is None and self._done % self._eta_every == 0:
                self._say_eta(now)

    def _say_eta(self, now: float) -> None:
        """Every few cells in plain logs: how far the run is and when it should end."""
        done = sum(line.done for line in self._lines.values())
        total = sum(line.total for line in self._lines.values())
        if done >= total:
            return
        failed = sum(line.failed for line in self._lines.values())
        failed_text = f", {failed} failed" if failed else ""
        self._say(
            f"[run] {done}/{total} cells done{failed_text}; ETA {eta_text(self._run_left(now))}"
        )


def warning_text(event: dict[str, Any]) -> str:
    """A runner's `warning` event in words: a refused cache reset says what it means."""
    what, detail = event.get("what"), event.get("detail")
    if what == "reset" and isinstance(detail, dict):
        return (
            f"cache reset refused ({reset_answer(detail)}): this cell runs on the previous "
            "cell's warm cache"
        )
    return f"{what}: {detail}"
