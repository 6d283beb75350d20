"""The simulated scheduler: prefill new requests, then decode steps at the modelled speed.

Each step sleeps for the model's cost (times the server's time scale, with noise) and hands the
tokens it emitted to each request's queue; every `--decode-log-interval` steps it writes SGLang's
`Decode batch` line.
"""

from __future__ import annotations

import argparse
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.sim import model as m
from orchestrator.sim.prefix_cache import PrefixCache
from orchestrator.sim.profiler import Profiler
from orchestrator.sim.starts import ServerStart

_TEXT = (
    "the model serves tokens at a steady rate while the draft proposes and the target "
    "verifies each step of decoding on eight GPUs with tensor parallel all reduce over NVLink"
)
VOCAB = _TEXT.split()


class EngineHost(Protocol):
    """What the engine reads of the server it runs in (sim/server.py's SimServer)."""

    @property
    def args(self) -> argparse.Namespace: ...
    @property
    def cfg(self) -> m.ServingConfig: ...
    @property
    def clock(self) -> float: ...
    @property
    def effective_env(self) -> dict[str, str]: ...
    @property
    def log(self) -> Callable[..., object]: ...  # (message, tag="")
    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def step(self) -> m.StepCost: ...
    @property
    def time_scale(self) -> float: ...
    @property
    def noise(self) -> float: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def start(self) -> ServerStart: ...  # this server start: its speed factor (>1 is slower)

    def throttle_slowdown(self, now: float) -> float: ...
    @property
    def profiler(self) -> Profiler: ...
    def token_usage(self, reqs: list[Request]) -> float: ...


@dataclass
class Request:
    """One generation request inside the engine."""

    rid: str
    prompt_tokens: int
    max_new_tokens: int
    factor: float = 1.0
    generated: int = 0
    spec_steps: int = 0
    created: float = field(default_factory=time.monotonic)
    events: queue.Queue[int | None] = field(default_factory=queue.Queue)

    @property
    def done(self) -> bool:
        """All requested tokens were emitted."""
        return self.generated >= self.max_new_tokens


def token_text(rid: str, start: int, count: int) -> str:
    """Deterministic words for tokens start..start+count of a request (one word per token)."""
    base = sum(rid.encode()) % len(VOCAB)
    return "".join(" " + VOCAB[(base + 7 * i) % len(VOCAB)] for i in range(start, start + count))


class Engine(threading.Thread):
    """The scheduler loop: prefill new requests, then decode steps for the running batch."""

    def __init__(self, server: EngineHost) -> None:
        super().__init__(daemon=True, name="engine")
        self.srv = server
        self.cv = threading.Condition()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.stopping = False
        self.deadline: float | None = None
        self.rng = random.Random(server.seed)
        self.noise = m.Noise(server.seed, server.noise, float(server.params["noise_correlation"]))
        self.steps = 0
        self.spec_tokens = 0  # tokens emitted by decode steps (accepted drafts + bonus)
        self.spec_forwards = 0  # request-steps, SGLang's spec_num_total_forward_ct
        self.last_gen_throughput = 0.0
        self.prefix_cache = PrefixCache()  # SGLang's radix cache, counted (prefix_cache.py)
        self._interval_tokens = 0
        self._interval_steps = 0
        self._interval_ms = 0.0

    def submit(self, req: Request) -> None:
        """Queue a request; it is prefilled at the next iteration."""
        with self.cv:
            req.factor = self.noise.request_factor()
            self.waiting.append(req)
            self.cv.notify()

    def stop(self) -> None:
        """End the loop; running requests are cut off."""
        with self.cv:
            self.stopping = True
            self.cv.notify()

    def _sleep(self, sim_ms: float) -> None:
        # Absolute deadlines keep the average rate exact even when one sleep overshoots.
        now = time.monotonic()
        if self.deadline is None or now - self.deadline > 0.25:
            self.deadline = now
        self.deadline += sim_ms / 1000.0 * self.srv.time_scale
        self._interval_ms += sim_ms
        delay = self.deadline - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _accepted(self, acceptance: tuple[float, ...]) -> int:
        n = 1
        for rate in acceptance:
            if self.rng.random() >= rate:
                break
            n += 1
        return n

    def run(self) -> None:
        """Loop until stopped."""
        while True:
            with self.cv:
                while not self.waiting and not self.running and not self.stopping:
                    self.deadline = None
                    self.cv.wait()
                if self.stopping:
                    for req in [*self.waiting, *self.running]:
                        req.events.put(None)
                    return
                new = list(self.waiting)[: self.srv.args.max_running_requests]
                for _ in new:
                    self.waiting.popleft()
            if new:
                self._prefill(new)
            else:
                self._decode()

    def _prefill(self, new: list[Request]) -> None:
        srv = self.srv
        tokens = sum(r.prompt_tokens for r in new)
        cost = m.prefill_ms(srv.params, srv.cfg, srv.effective_env, tokens, srv.clock)
        factor = sum(r.factor for r in new) / len(new) * srv.throttle_slowdown(time.time())
        factor *= srv.start.factor
        self._sleep(cost * factor * self.noise.step_factor())
        srv.log(
            f"Prefill batch, #new-seq: {len(new)}, #new-token: {tokens}, #cached-token: 0, "
            f"token usage: {srv.token_usage(self.running):.2f}, "
            f"#running-req: {len(self.running)}, #queue-req: {len(self.waiting)}, ",
            "TP0",
        )
        for req in new:
            # The prefill forward pass yields each request's first token (none when 0 were asked).
            req.generated = min(1, req.max_new_tokens)
            if req.generated:
                req.events.put(req.generated)
            if req.done:
                req.events.put(None)
            else:
                with self.cv:
                    self.running.append(req)

    def _decode(self) -> None:
        srv = self.srv
        batch = list(self.running)
        factor = sum(r.factor for r in batch) / len(batch) * srv.throttle_slowdown(time.time())
        factor *= srv.start.factor
        cost = srv.step.step_ms * m.batch_factor(srv.params, len(batch)) * factor
        taken = cost * self.noise.step_factor()
        if srv.profiler.recording():
            # the model's phases, scaled to the step as it ran (batch, noise, throttling)
            phases = m.step_phases(srv.params, srv.cfg, srv.effective_env, srv.clock)
            scale = taken / max(1e-9, sum(phases.values()))
            srv.profiler.step({k: v * scale for k, v in phases.items()})
        self._sleep(taken)
        emitted = 0
        for req in batch:
            n = self._accepted(srv.step.acceptance) if srv.cfg.speculating else 1
            n = min(n, req.max_new_tokens - req.generated)
            req.generated += n
            req.spec_steps += 1
            emitted += n
            req.events.put(n)
            if req.done:
                req.events.put(None)
        with self.cv:
            self.running = [r for r in self.running if not r.done]
            self.steps += 1
            self.spec_tokens += emitted
            self.spec_forwards += len(batch)
            self._interval_tokens += emitted
            self._interval_steps += len(batch)
        if self.steps % max(1, srv.args.decode_log_interval) == 0:
            self._log_decode(batch)

    def _log_decode(self, batch: list[Request]) -> None:
        srv = self.srv
        # Busy (simulated) time of the interval: idle gaps between requests do not count.
        self.last_gen_throughput = 1000.0 * self._interval_tokens / max(1e-9, self._interval_ms)
        spec = ""
        if srv.cfg.speculating and self._interval_steps:
            accept_len = self._interval_tokens / self._interval_steps
            rate = (accept_len - 1) / max(1, srv.cfg.num_steps)
            spec = f"accept len: {accept_len:.2f}, accept rate: {rate:.2f}, "
        tokens = sum(r.prompt_tokens + r.generated for r in batch)
        srv.log(
            f"Decode batch, #running-req: {len(batch)}, #token: {tokens}, "
            f"token usage: {srv.token_usage(batch):.2f}, {spec}"
            f"cuda graph: {not srv.cfg.disable_cuda_graph}, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
            f"#queue-req: {len(self.waiting)}, ",
            "TP0",
        )
        self._interval_tokens = 0
        self._interval_steps = 0
        self._interval_ms = 0.0

    def avg_accept_length(self) -> float | None:
        """Cumulative tokens per decode step since start (None before any step)."""
        with self.cv:
            return self.spec_tokens / self.spec_forwards if self.spec_forwards else None
