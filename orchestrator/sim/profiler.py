"""The simulated server's profiler: SGLang's /start_profile and /stop_profile, and a trace of the
model's phases in the torch profiler's Chrome trace format.

Each recorded decode step is one `user_annotation` event ("decode step") holding one
`gpu_user_annotation` event per phase of the model's step (draft steps, target verify forward,
all-reduce; or target forward and all-reduce without speculation), on the simulated timeline in
microseconds, so a summary reads the model's own times ("target verify forward: 19.0 ms per
step") whatever the time scale. With `num_steps` the profile stops by itself after that many
steps, as SGLang's does; the file is `<output_dir>/<profile_id>-TP-0.trace.json.gz`.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

STEP_EVENT = "decode step"


class Profiler:
    """One server's profiling state; every method is safe from the HTTP and engine threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[str, Any] | None = None
        self._clock_us = 0.0  # the simulated timeline of recorded steps

    def start(self, body: Mapping[str, Any]) -> tuple[int, str]:
        """(HTTP status, text) for POST /start_profile."""
        output_dir = body.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        steps = body.get("num_steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)):
            return 400, "num_steps must be an integer\n"
        with self._lock:
            if self._active is not None:
                return 500, "Profiling is already in progress. Call /stop_profile first.\n"
            os.makedirs(str(output_dir), exist_ok=True)
            self._active = {
                "output_dir": str(output_dir),
                "left": steps,
                "id": str(time.time()),  # SGLang sets it; a client cannot
                "events": [],
            }
        return 200, "Start profiling.\n"

    def stop(self) -> tuple[int, str]:
        """(HTTP status, text) for POST /stop_profile."""
        with self._lock:
            active, self._active = self._active, None
        if active is None:
            return 500, "Profiling is not in progress. Call /start_profile first.\n"
        _save(active)
        return 200, "Stop profiling. This will take some time.\n"

    def step(self, phases_ms: Mapping[str, float]) -> None:
        """Record one decode step made of `phases_ms` (simulated milliseconds, in order)."""
        with self._lock:
            active = self._active
            if active is None:
                return
            start = self._clock_us
            total = 1000.0 * sum(phases_ms.values())
            events = active["events"]
            events.append(_event(STEP_EVENT, "user_annotation", start, total))
            at = start
            for name, ms in phases_ms.items():
                events.append(_event(name, "gpu_user_annotation", at, 1000.0 * ms))
                at += 1000.0 * ms
            self._clock_us = start + total
            if active["left"] is None:
                return  # until /stop_profile
            active["left"] -= 1
            if active["left"] > 0:
                return
            self._active = None
        _save(active)

    def recording(self) -> bool:
        """True while a profile is being taken (the engine then splits its steps)."""
        return self._active is not None


def _event(name: str, cat: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 0, "ts": ts, "dur": dur}


def _save(active: Mapping[str, Any]) -> None:
    path = os.path.join(active["output_dir"], f"{active['id']}-TP-0.trace.json.gz")
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump({"traceEvents": active["events"], "displayTimeUnit": "ms"}, fh)
    os.replace(tmp, path)
