"""The runner process's channel to the controller: one locked stdout, heartbeats, and the stop
request that stdin's EOF, the parent's exit or a signal raises. Host side, Python 3.8, stdlib."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from typing import IO, Any

from orchestrator.runner.protocol import now, silence_stdout


class Control:
    """What every cell of one runner process shares: stdout, its lock, the stop request and
    the watchers that raise it (stdin EOF, parent exit, SIGTERM/SIGINT/SIGHUP)."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.out_broken = False
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.stop_reason = ""
        self.finished = threading.Event()
        self.watching = False

    def write_line(self, line: str) -> None:
        """One line to stdout (the caller holds `lock`); a closed stdout means 'controller gone'."""
        if self.out_broken:
            return
        try:
            self.out.write((line + "\n").encode("utf-8"))
            self.out.flush()
        except (OSError, ValueError):
            self.out_broken = True
            silence_stdout()
            self.interrupt("controller gone (stdout closed)")

    def start_heartbeat(self, interval: float) -> None:
        """A `heartbeat` line every `interval` seconds until the runner is finished: the
        controller tells a silent host (a cut link, a frozen machine) from a busy one."""

        def beat() -> None:
            while not self.finished.wait(interval):
                with self.lock:
                    self.write_line(json.dumps({"event": "heartbeat", "t": round(now(), 3)}))

        threading.Thread(target=beat, name="heartbeat", daemon=True).start()

    def interrupt(self, reason: str) -> None:
        """Ask the runner to stop (first reason wins)."""
        if not self.stop_event.is_set():
            self.stop_reason = reason
            self.stop_event.set()

    def _watch_stdin(self) -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        self.interrupt("controller gone (stdin closed)")

    def _watch_parent(self, ppid: int) -> None:
        while not self.finished.wait(0.5):
            if os.getppid() != ppid:
                self.interrupt("controller gone (parent process exited)")
                return

    def start_watchers(self) -> None:
        """Watch stdin, the parent process and signals for 'controller gone' (once)."""
        if self.watching:
            return
        self.watching = True
        threading.Thread(target=self._watch_stdin, name="stdin", daemon=True).start()
        threading.Thread(
            target=self._watch_parent, args=(os.getppid(),), name="parent", daemon=True
        ).start()

        # The handler takes no lock: Event.set() in a handler deadlocks when the signal lands
        # while this thread holds the event's lock (in stop_event.wait, or a first handler).
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)

        def on_signal(signum: int, _frame: Any) -> None:
            with contextlib.suppress(OSError):  # a full pipe: a signal is already on its way
                os.write(wake_w, bytes([signum]))

        def relay() -> None:
            signum = os.read(wake_r, 1)[0]
            self.interrupt("signal %s" % signal.Signals(signum).name)

        threading.Thread(target=relay, name="signals", daemon=True).start()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)
