"""Live progress of a run: one line per host on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from orchestrator.results.records import reset_answer
from orchestrator.results.terminal import printable


@dataclass
class HostLine:
    """What one host is doing now."""

    total: int
    done: int = 0
    failed: int = 0
    cell: str = ""
    step: str = "connecting"
    started: float = field(default_factory=time.monotonic)


class Progress:
    """Receives controller and runner events; renders them live or as log lines.

    Thread-safe: hosts report from their own threads.
    """

    def __init__(self, hosts: dict[str, int], *, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()
        self._lines = {h: HostLine(total=n) for h, n in hosts.items()}
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

    def _table(self) -> Table:
        table = Table(show_header=True, header_style="bold", box=None)
        for col in ("host", "cells", "failed", "now", "step", "elapsed"):
            table.add_column(col)
        for host, line in self._lines.items():
            table.add_row(
                host,
                f"{line.done}/{line.total}",
                str(line.failed) if line.failed else "",
                line.cell,
                line.step,
                f"{time.monotonic() - line.started:.0f}s",
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

    def cell_done(self, host: str, cell_id: str, status: str, reason: str | None) -> None:
        """A cell finished (passed, failed, interrupted, skipped)."""
        with self._lock:
            line = self._lines[host]
            line.done += 1
            if status != "passed":
                line.failed += 1
            line.step = status
            tail = f": {reason.splitlines()[0]}" if reason else ""
            self._say(f"[{host}] {cell_id}: {status.upper()}{tail}")


def warning_text(event: dict[str, Any]) -> str:
    """A runner's `warning` event in words: a refused cache reset says what it means."""
    what, detail = event.get("what"), event.get("detail")
    if what == "reset" and isinstance(detail, dict):
        return (
            f"cache reset refused ({reset_answer(detail)}): this cell runs on the previous "
            "cell's warm cache"
        )
    return f"{what}: {detail}"
