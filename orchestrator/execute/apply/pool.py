"""Working on many hosts at once: bounded parallelism, and connection starts spaced apart.

Spacing matters behind a bastion: every ProxyJump connection is a fresh unauthenticated session
on the jump host's sshd, which drops them at random beyond MaxStartups (10 by default).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from orchestrator.config.host import Host
from orchestrator.execute.transport.connect import Connection, connect

T = TypeVar("T")


class StartSpacing:
    """Hands out start times at least `seconds` apart to the threads that ask; thread-safe."""

    def __init__(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("spacing must be 0 or more seconds")
        self.seconds = seconds
        self._lock = threading.Lock()
        self._next = 0.0

    def wait(self) -> float:
        """Return at this caller's turn (`seconds` after the previous caller's, or now): the
        turn's time on the monotonic clock."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.seconds
        if start > now:
            time.sleep(start - now)
        return start


@dataclass
class HostOutcome(Generic[T]):
    """What a function gave for one host: a value or the exception it raised."""

    host: str
    value: T | None = None
    error: BaseException | None = None
    seconds: float = 0.0
    turn: float = 0.0  # the start StartSpacing granted (monotonic clock)

    @property
    def ok(self) -> bool:
        """True when the function returned without raising."""
        return self.error is None


class HostPool:
    """Run a function per host in parallel: at most `max_parallel` at once, starts spaced
    `stagger` seconds apart."""

    def __init__(self, max_parallel: int = 16, stagger: float = 0.05) -> None:
        if max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")
        self.max_parallel = max_parallel
        self.spacing = StartSpacing(stagger)

    def map(
        self,
        hosts: Sequence[Host],
        fn: Callable[[Host], T],
        *,
        spaced: bool = True,
        on_interrupt: Callable[[], None] | None = None,
    ) -> dict[str, HostOutcome[T]]:
        """Call `fn(host)` for every host; one host's exception never stops the others.
        Returns outcomes by host name, in the order of `hosts`.

        `spaced=False` leaves the spacing to `fn` (the controller spaces each connection,
        reconnects too). With `on_interrupt`, Ctrl-C calls it and the wait goes on (the caller
        tells its workers to stop); without, Ctrl-C ends the wait once the workers return."""

        def one(host: Host) -> HostOutcome[T]:
            turn = self.spacing.wait() if spaced else time.monotonic()
            started = time.monotonic()
            try:
                value = fn(host)
            except Exception as exc:
                return HostOutcome(
                    host.name, error=exc, seconds=time.monotonic() - started, turn=turn
                )
            return HostOutcome(
                host.name, value=value, seconds=time.monotonic() - started, turn=turn
            )

        if not hosts:
            return {}
        workers = min(self.max_parallel, len(hosts))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="orch-host") as pool:
            futures = [pool.submit(one, host) for host in hosts]
            # Polled, with the check inside the try: a Ctrl-C may land anywhere in the loop, and
            # concurrent.futures.wait() would leave its waiter on the futures when it does.
            while True:
                try:
                    if all(f.done() for f in futures):
                        break
                    time.sleep(0.1)
                except KeyboardInterrupt:
                    if on_interrupt is None:
                        raise
                    on_interrupt()
        outcomes = [f.result() for f in futures]
        return {outcome.host: outcome for outcome in outcomes}

    def connect_all(
        self, hosts: Sequence[Host], **connect_options: Any
    ) -> dict[str, HostOutcome[Connection]]:
        """`connect()` to every host in parallel; failures are outcomes, not exceptions."""
        return self.map(hosts, lambda host: connect(host, **connect_options))
