"""GPU telemetry sampled while a cell's server runs: one streaming `nvidia-smi` child per cell.

Host side (Python 3.8, standard library only). `Sampler.start(folder, interval_s, fields)` starts
one long-lived `nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits -lms N`, reads its
stdout line by line in a thread as it streams, stamps each line at read with `protocol.now()`
(the clock the runner records repeat start and end with) and appends it to `FOLDER/telemetry.csv`:

    t,index,clocks.sm,clocks.mem,power.draw,...
    1764599723.123,0,1980,3201,118.50,...

Header once; one row per GPU per sample; t in seconds since the epoch rounded to ms; values as
nvidia-smi printed them, except `[N/A]`-style values (empty) and the clock-event bitmask (leading
zeros dropped: `0x4`). When the current field names fail (drivers before ~535.113) the query is
retried with the older `clocks_throttle_reasons.active`; the column keeps the current name.
`stop()` ends the child and writes `FOLDER/telemetry.json` (fields, interval, rows, or the reason
telemetry is off). Neither method raises: telemetry must never fail a cell.

The child also ends when this process dies: its stdout is our pipe, so its next write fails.
See docs/FACTS.md, "nvidia-smi".
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import IO, Any

from orchestrator.runner.context import CellContext
from orchestrator.runner.layout import TELEMETRY_CSV, TELEMETRY_JSON
from orchestrator.runner.protocol import now

DEFAULT_INTERVAL_S = 1.0
FIRST_SAMPLE_WAIT_S = 3.0
DEFAULT_FIELDS = (
    "clocks.sm",
    "clocks.mem",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "utilization.gpu",
    "memory.used",
    "clocks_event_reasons.active",
)
REASONS_FIELD = "clocks_event_reasons.active"
_LEGACY = {REASONS_FIELD: "clocks_throttle_reasons.active"}
_UNAVAILABLE = re.compile(
    r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU is lost)\]?$", re.I
)


def query_fields(fields: Any) -> list[str]:
    """`fields` as nvidia-smi names with `index` first (added when absent), duplicates dropped."""
    names = ["index"]
    for name in list(fields or DEFAULT_FIELDS):
        key = str(name).strip()
        if key and "," not in key and key not in names:
            names.append(key)
    return names


def _value(field: str, raw: str) -> str:
    value = raw.strip()
    if not value or _UNAVAILABLE.match(value):
        return ""
    if field in (REASONS_FIELD, _LEGACY[REASONS_FIELD]) and value.lower().startswith("0x"):
        try:
            return hex(int(value, 16))
        except ValueError:
            return ""
    return value.replace(",", " ")


class TelemetryFile:
    """Appends samples to a telemetry CSV: the header once, one row per nvidia-smi line."""

    def __init__(self, path: str, fields: list[str]) -> None:
        self.path = path
        self.fields = fields
        self.rows = 0
        fresh = not os.path.exists(path) or os.path.getsize(path) == 0
        self._fh: IO[str] = open(path, "a", encoding="utf-8", newline="")  # noqa: SIM115
        if fresh:
            self._fh.write("t," + ",".join(fields) + "\n")
            self._fh.flush()

    def parse(self, line: str) -> list[str] | None:
        """The row's values for one nvidia-smi output line, or None for anything else."""
        parts = line.rstrip("\r\n").split(", ")
        if len(parts) != len(self.fields) or not parts[0].strip().isdigit():
            return None
        return [_value(self.fields[i], part) for i, part in enumerate(parts)]

    def write_line(self, t: float, line: str, flush: bool = True) -> bool:
        """Append one nvidia-smi line read at `t`; False (nothing written) when it is no sample."""
        values = self.parse(line)
        if values is None:
            return False
        self._fh.write(f"{t:.3f},{','.join(values)}\n")
        self.rows += 1
        if flush:
            self._fh.flush()
        return True

    def close(self) -> None:
        """Flush and close the file."""
        if not self._fh.closed:
            self._fh.close()


class Sampler:
    """One streaming nvidia-smi child whose lines go to `telemetry.csv` until `stop()`."""

    def __init__(self, command: str = "nvidia-smi") -> None:
        self.command = command
        self.folder: str | None = None
        self.interval_s = DEFAULT_INTERVAL_S
        self.fields: list[str] = []
        self.legacy_names = False
        self.off_reason: str | None = None
        self.errors: deque[str] = deque(maxlen=20)  # a GPU erroring for hours stays small
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self._file: TelemetryFile | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._first = threading.Event()  # the first sample was written, or sampling ended
        self._sampled = threading.Condition()  # notified at every sample and when sampling ends
        self.last_sample_t: float | None = None
        self._ended = False
        self._lock = threading.Lock()

    # -- public -------------------------------------------------------------------------------

    def start(
        self, folder: str, interval_s: float = DEFAULT_INTERVAL_S, fields: Any = None
    ) -> None:
        """Start sampling every `interval_s` into `folder`; a failure turns telemetry off."""
        try:
            self.folder = folder
            self.interval_s = max(0.01, float(interval_s))
            self.fields = query_fields(fields)
            self.started_at = now()
            os.makedirs(folder, exist_ok=True)
            self._file = TelemetryFile(os.path.join(folder, TELEMETRY_CSV), self.fields)
            self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
            self._thread.start()
            atexit.register(self._kill_child)
        except Exception as exc:
            self.off_reason = f"cannot start telemetry: {exc}"

    def stop(self) -> dict[str, Any]:
        """Stop the child, finish the files and return what `telemetry.json` says; never raises."""
        try:
            self._stopping.set()
            self._kill_child()
            if self._thread is not None:
                self._thread.join(timeout=5.0)
            atexit.unregister(self._kill_child)
            if self.stopped_at is None:
                self.stopped_at = now()
            if self._file is not None:
                self._file.close()
            info = self.info()
            if self.folder is not None:
                with open(os.path.join(self.folder, TELEMETRY_JSON), "w", encoding="utf-8") as fh:
                    json.dump(info, fh, indent=1, sort_keys=True)
                    fh.write("\n")
            return info
        except Exception as exc:
            return {"enabled": False, "off": f"cannot stop telemetry: {exc}"}

    def wait_first_sample(self, timeout: float) -> bool:
        """Wait (at most `timeout` s) until the first sample is written; whether one was."""
        if self._thread is not None:
            self._first.wait(timeout)
        return self._file is not None and self._file.rows > 0

    def wait_sample_after(self, t: float, timeout: float) -> bool:
        """Wait (at most `timeout` s) for a sample stamped after `t`, so the span up to `t` is
        covered; whether one came."""
        if self._thread is None:
            return False
        deadline = time.monotonic() + timeout
        with self._sampled:
            while not self._ended and (self.last_sample_t is None or self.last_sample_t <= t):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._sampled.wait(left)
            return self.last_sample_t is not None and self.last_sample_t > t

    @property
    def pid(self) -> int | None:
        """The nvidia-smi child's pid while one runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def info(self) -> dict[str, Any]:
        """The telemetry record: on or off (and why), fields, interval, rows written."""
        return {
            "enabled": self.off_reason is None,
            "off": self.off_reason,
            "file": TELEMETRY_CSV if self._file is not None else None,
            "fields": self.fields,
            "legacy_names": self.legacy_names,
            "interval_s": self.interval_s,
            "rows": self._file.rows if self._file is not None else 0,
            "started": None if self.started_at is None else round(self.started_at, 3),
            "stopped": None if self.stopped_at is None else round(self.stopped_at, 3),
            "errors": list(self.errors)[-5:],
        }

    # -- the reading thread -------------------------------------------------------------------

    def _argv(self, legacy: bool) -> list[str]:
        names = [_LEGACY.get(f, f) if legacy else f for f in self.fields]
        ms = max(1, int(self.interval_s * 1000 + 0.5))
        return [
            self.command,
            "--query-gpu=" + ",".join(names),
            "--format=csv,noheader,nounits",
            "-lms",
            str(ms),
        ]

    def _run(self) -> None:
        try:
            refused, outcome = self._stream(legacy=False)
            if refused and any(f in _LEGACY for f in self.fields):
                self.legacy_names = True
                refused, outcome = self._stream(legacy=True)
            if outcome != "stopped":
                self.off_reason = outcome
        except Exception as exc:
            self.off_reason = f"telemetry failed: {exc}"
        finally:
            self._first.set()
            with self._sampled:
                self._ended = True
                self._sampled.notify_all()
            self._kill_child()

    def _stream(self, legacy: bool) -> tuple[bool, str]:
        """Run one child until it ends: (its query was refused, "stopped" or why it ended)."""
        assert self._file is not None
        with self._lock:
            if self._stopping.is_set():
                return False, "stopped"
            try:
                # a group of its own: an nvidia-smi that is a shell wrapper without `exec` is
                # stopped whole, not the shell alone while its child holds the pipe
                self._proc = subprocess.Popen(
                    self._argv(legacy),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                return False, f"cannot run {self.command}: {exc}"
            proc = self._proc
        stdout = proc.stdout
        assert stdout is not None
        samples = 0
        while True:
            raw = stdout.readline()
            if not raw:
                break
            line = raw.decode("utf-8", "replace")
            t = now()
            if self._file.write_line(t, line):
                samples += 1
                self._first.set()
                with self._sampled:
                    self.last_sample_t = t
                    self._sampled.notify_all()
            elif line.strip():
                self.errors.append(line.strip()[:200])
        rc = proc.wait()
        if self._stopping.is_set():
            return False, "stopped"
        if samples == 0:
            refused = any("not a valid field" in e for e in list(self.errors)[-3:])
            last = self.errors[-1] if self.errors else "no output"
            return refused, f"{self.command} exited with rc {rc}: {last}"
        return False, f"{self.command} ended early with rc {rc}"

    def _kill_child(self) -> None:
        with self._lock:
            proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=2.0)
            with contextlib.suppress(OSError):  # what the group still holds (a wrapper's child)
                os.killpg(proc.pid, signal.SIGKILL)
        except (OSError, subprocess.TimeoutExpired):
            pass


class TelemetryStep(CellContext):
    """A cell's sampling: from just before its server starts (or is taken over from the cell
    before it) until its bench is over, whatever happened; each cell of a server session samples
    its own time into its own telemetry.csv."""

    sampler: Sampler | None = None
    telemetry_info: dict[str, Any] | None = None

    def start_telemetry(self) -> None:
        """Start sampling as the cell's `telemetry` asks; nvidia-smi absent: a note, no failure."""
        spec = self.cell.get("telemetry", {})
        if spec is None or spec is False:
            spec = {"enabled": False}
        if not isinstance(spec, dict):
            spec = {}
        if spec.get("enabled") is False:
            self.telemetry_info = {"enabled": False, "off": "telemetry: false in the playbook"}
            return
        command = shutil.which("nvidia-smi")
        if command is None:
            self.telemetry_info = {"enabled": False, "off": "nvidia-smi not found on PATH"}
            return
        interval = spec.get("interval")
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or interval <= 0:
            interval = DEFAULT_INTERVAL_S
        self.sampler = Sampler(command)
        self.sampler.start(self.dir, float(interval), spec.get("fields"))
        # The first sample takes nvidia-smi's start-up; a shared server's bench may begin at once.
        self.sampler.wait_first_sample(FIRST_SAMPLE_WAIT_S)

    def stop_telemetry(self) -> None:
        """Stop sampling (once); what telemetry.json says goes to cell.json as well."""
        sampler, self.sampler = self.sampler, None
        if sampler is None:
            return
        if not self.stop_event.is_set():
            # One more sample, so the last repeat's end is covered (not cut at the last sample).
            sampler.wait_sample_after(now(), 2.0 * sampler.interval_s + 1.0)
        info = sampler.stop()
        info.pop("errors", None)
        if sampler.errors:
            info["last_error"] = sampler.errors[-1]
        self.telemetry_info = info
        if not info.get("enabled"):
            self.emit({"event": "warning", "what": "telemetry", "detail": info.get("off")})


def main(argv: list[str]) -> int:
    """`python -m orchestrator.runner.telemetry FOLDER [INTERVAL_S [SECONDS]]`: sample, then print
    the telemetry record, this process's CPU seconds (cpu_s) and nvidia-smi's (child_cpu_s) as
    one JSON line (bench/telemetry_overhead.py)."""
    if not argv:
        sys.stderr.write("usage: telemetry FOLDER [INTERVAL_S [SECONDS]]\n")
        return 2
    interval = float(argv[1]) if len(argv) > 1 else DEFAULT_INTERVAL_S
    seconds = float(argv[2]) if len(argv) > 2 else 10.0
    wall0, cpu0 = time.time(), time.process_time()
    sampler = Sampler()
    sampler.start(argv[0], interval)
    time.sleep(seconds)
    info = sampler.stop()
    info["cpu_s"] = round(time.process_time() - cpu0, 4)
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    info["child_cpu_s"] = round(child.ru_utime + child.ru_stime, 4)
    info["wall_s"] = round(time.time() - wall0, 3)
    sys.stdout.write(json.dumps(info, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
