"""vLLM's periodic stats lines, placed in time and kept only inside a repeat's window.

vLLM logs, every VLLM_LOG_STATS_INTERVAL seconds (10 by default), one line per engine covering
the time since its previous log call, followed by its spec-decode line for the same interval:

    INFO 01-14 10:05:20 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s,
        Avg generation throughput: 90.3 tokens/s, Running: 1 reqs, ...
    INFO 01-14 10:05:20 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.44, ...

The timestamp is the server's local wall-clock time (Python logging's `%m-%d %H:%M:%S`): no year,
no zone, truncated to the second. The runner records each repeat's start and end as epoch
seconds and the host's UTC offset then (exit.json `utc_offset_s`, `utc_offset_end_s`); the year
is the one, of the window's year and its neighbours, that puts the line nearest the window.
A server in another zone than the runner (TZ in the cell's env is honoured; a container on UTC
is not known) is caught by a check: the cell's own log lines must lie within the cell's start
and finish (cell.json), else no log metric is read at all. A repeat during which the host's
offset changed (DST) gives none either.

An interval counts for a repeat only when it surely lies inside the window: the engine's
previous stats line is at or after the start, and the line's own second ends by the end. The
previous *visible* line bounds the interval's start from below (vLLM logs an idle engine's
lines at DEBUG, so the true previous tick may be later), so the rule never takes in time from
outside the window; an engine's first line has no known start and never counts. Of those,
log_gen_throughput takes only intervals under load at both ends (requests running or waiting
at the line before and at its own line, `Running: N reqs, Waiting: M reqs`): a repeat needs
about three VLLM_LOG_STATS_INTERVAL of load to give one.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# `INFO 01-14 10:05:20 [` (optionally `.123` when a logging config adds milliseconds)
_STAMP = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(\.\d+)?\s+\["
)
_ENGINE = re.compile(r"Engine (\d+): Avg prompt throughput")
_STATS = re.compile(r"Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: ([\d.]+)")
_QUEUE = re.compile(r"Running: (\d+) reqs?(?:, (?:Swapped: \d+ reqs?, )?Waiting: (\d+) reqs?)?")
_SPEC_LINE = re.compile(r"SpecDecoding metrics: (.*)$")
_SPEC_FIELDS = {
    "mean_acceptance_length": re.compile(r"Mean acceptance length: ([\d.]+)"),
    "accepted_throughput": re.compile(r"Accepted throughput: ([\d.]+)"),
    "drafted_throughput": re.compile(r"Drafted throughput: ([\d.]+)"),
    "accepted_tokens": re.compile(r"Accepted: (\d+) tokens"),
    "drafted_tokens": re.compile(r"Drafted: (\d+) tokens"),
}
_DRAFT_RATE = re.compile(r"Draft acceptance rate: ([\d.]+)(%?)")
_PER_POSITION = re.compile(r"Per-position acceptance rate: ([\d.]+(?:, [\d.]+)*)")

LOG_METRICS = ("log_gen_throughput", "log_accept_len", "log_draft_acceptance_rate")
SESSION_MARK = "[orch] start-up above"  # runner/session.py: a session cell's own part follows


@dataclass(frozen=True)
class Stamp:
    """A log line's local wall-clock time: month, day, seconds into the day, and resolution."""

    month: int
    day: int
    second: float
    resolution: float  # 1.0 for `HH:MM:SS`; the line happened within [second, second + this)


@dataclass
class Interval:
    """One stats line of one engine: generation throughput over (previous line, this line]."""

    engine: str
    stamp: Stamp | None
    previous: Stamp | None  # the engine's previous visible stats line; None for its first
    gen_throughput: float
    spec: dict[str, Any] = field(default_factory=dict)  # its SpecDecoding line, parsed
    # requests running or waiting at this line and at the previous one (None: not logged)
    busy: int | None = None
    busy_before: int | None = None

    @property
    def under_load(self) -> bool | None:
        """Requests were in the engine at both ends of the interval, so no idle part of a
        repeat's start-up or end is averaged in; None when the lines do not say."""
        if self.busy is None or self.busy_before is None:
            return None
        return self.busy > 0 and self.busy_before > 0


def parse_spec_body(body: str) -> dict[str, Any]:
    """The fields of one `SpecDecoding metrics:` line (rates as fractions, counts as floats)."""
    row: dict[str, Any] = {}
    for key, pattern in _SPEC_FIELDS.items():
        found = pattern.search(body)
        if found:
            row[key] = float(found.group(1))
    rate = _DRAFT_RATE.search(body)
    if rate:
        value = float(rate.group(1))
        row["draft_acceptance_rate"] = value / 100 if rate.group(2) else value
    per_position = _PER_POSITION.search(body)
    if per_position:
        row["per_position_acceptance_rate"] = [float(x) for x in per_position.group(1).split(", ")]
    return row


def _stamp(line: str) -> Stamp | None:
    match = _STAMP.search(line)
    if match is None:
        return None
    month, day, hh, mm, ss = (int(match.group(i)) for i in range(1, 6))
    fraction = match.group(6)
    second = hh * 3600 + mm * 60 + ss + (float(fraction) if fraction else 0.0)
    resolution = 10.0 ** -(len(fraction) - 1) if fraction else 1.0
    return Stamp(month, day, second, resolution)


@dataclass
class ServerLog:
    """What a server.log says in time: its stats intervals, every SpecDecoding line, and the
    first and last timestamped lines of the cell's own part (after a session's start-up)."""

    intervals: list[Interval] = field(default_factory=list)
    spec: list[dict[str, Any]] = field(default_factory=list)
    first: Stamp | None = None
    last: Stamp | None = None


def _same_tick(a: Stamp | None, b: Stamp | None) -> bool:
    """Two lines of one log call (their seconds may straddle a tick of the clock)."""
    return (
        a is not None
        and b is not None
        and (a.month, a.day) == (b.month, b.day)
        and abs(a.second - b.second) <= 1.0
    )


def parse_log(text: str) -> ServerLog:
    """Every stats line as an Interval (the SpecDecoding line vLLM writes right after it, for
    the same interval, attached) and every SpecDecoding line's fields, in log order."""
    log = ServerLog()
    last: dict[str, Stamp | None] = {}
    last_busy: dict[str, int | None] = {}
    lines = text.splitlines()
    own = 0  # a session cell's server.log: the start-up part, the marker, then its own part
    for i, raw in enumerate(lines):
        if SESSION_MARK in raw:
            own = i + 1
        if "throughput" not in raw and "SpecDecoding" not in raw:
            continue  # most lines: skip the regexes
        line = _ANSI.sub("", raw)
        spec = _SPEC_LINE.search(line)
        if spec is not None:
            row = parse_spec_body(spec.group(1))
            log.spec.append(row)
            latest = log.intervals[-1] if log.intervals else None
            if latest is not None and not latest.spec and _same_tick(latest.stamp, _stamp(line)):
                latest.spec = row
            continue
        stats = _STATS.search(line)
        if stats is None:
            continue
        engine_match = _ENGINE.search(line)
        engine = engine_match.group(1) if engine_match else ""
        stamp = _stamp(line)
        queue = _QUEUE.search(line)
        busy = int(queue.group(1)) + int(queue.group(2) or 0) if queue else None
        log.intervals.append(
            Interval(
                engine,
                stamp,
                last.get(engine),
                float(stats.group(1)),
                busy=busy,
                busy_before=last_busy.get(engine),
            )
        )
        last[engine] = stamp
        last_busy[engine] = busy
    log.first = next((st for ln in lines[own:] if (st := _stamp(_ANSI.sub("", ln)))), None)
    tail = reversed(lines[own:])
    log.last = next((st for ln in tail if (st := _stamp(_ANSI.sub("", ln)))), None)
    return log


@dataclass(frozen=True)
class Window:
    """A repeat's start and end (epoch seconds) and the server's zone then."""

    start: float
    end: float
    zone: tzinfo


def window_zone(exit_doc: Mapping[str, Any], env: Mapping[str, str]) -> tuple[tzinfo | None, str]:
    """The zone the server's log clock ran in during a repeat, and how it was found (or why
    not): the cell env's TZ when it sets one (the server inherits it), else the runner's UTC
    offset at the repeat's start and end, which must agree."""
    tz = env.get("TZ")
    if tz is not None:
        name = tz.lstrip(":") or "UTC"
        try:
            return ZoneInfo(name), f"TZ={tz} from the cell's env"
        except (ZoneInfoNotFoundError, ValueError):
            return None, f"the cell's env sets TZ={tz!r}, which is not a zone name this host knows"
    start, end = exit_doc.get("utc_offset_s"), exit_doc.get("utc_offset_end_s", None)
    if not isinstance(start, int) or isinstance(start, bool):
        return None, "exit.json records no utc_offset_s (a runner from before it did)"
    if end is not None and end != start:
        return None, f"the host's UTC offset changed during the repeat ({start}s -> {end}s)"
    return timezone(timedelta(seconds=start)), f"the host's UTC offset, {start}s"


def repeat_window(exit_doc: Any, env: Mapping[str, str]) -> tuple[Window | None, str]:
    """A measured repeat's Window from its exit.json, or None and the reason."""
    if not isinstance(exit_doc, Mapping):
        return None, "no exit.json"
    start, end = exit_doc.get("start"), exit_doc.get("end")
    if not isinstance(start, int | float) or not isinstance(end, int | float) or end <= start:
        return None, "exit.json records no start and end"
    zone, how = window_zone(exit_doc, env)
    if zone is None:
        return None, how
    return Window(float(start), float(end), zone), how


CLOCK_SLACK = 2.0  # seconds: a line logged as the runner read the time


def clock_problem(log: ServerLog, zone: tzinfo, started: float, finished: float) -> str | None:
    """Why the log's clock, read in `zone`, disagrees with the runner's, or None: the cell's
    own part of the log must lie within the cell's time (a server in another zone than the
    runner, e.g. a container on UTC, puts it hours away)."""
    span = Window(started, finished, zone)
    first = stamp_epoch(log.first, span) if log.first else None
    last = stamp_epoch(log.last, span) if log.last else None
    if first is None or last is None:
        return "server.log has no timestamped lines (VLLM_CONFIGURE_LOGGING=0?)"
    assert log.last is not None
    if first < started - CLOCK_SLACK or last + log.last.resolution > finished + CLOCK_SLACK:
        return (
            f"server.log's clock read as {zone} puts its lines at {utc_text(first)} to "
            f"{utc_text(last)}, outside the cell's {utc_text(started)} to {utc_text(finished)}: "
            "the server logs in another time zone than the runner (set TZ in the cell's env)"
        )
    return None


def placed_window(
    exit_doc: Any, env: Mapping[str, str], log: ServerLog, cell_doc: Any
) -> tuple[Window | None, str]:
    """A measured repeat's Window once the log's clock is checked against the cell's start
    and finish (cell.json), or None and the reason."""
    window, how = repeat_window(exit_doc, env)
    if window is None:
        return None, how
    started = cell_doc.get("started") if isinstance(cell_doc, Mapping) else None
    finished = cell_doc.get("finished") if isinstance(cell_doc, Mapping) else None
    if not isinstance(started, int | float) or not isinstance(finished, int | float):
        return None, "cell.json records no start and finish to check the log's clock against"
    problem = clock_problem(log, window.zone, float(started), float(finished))
    return (None, problem) if problem else (window, how)


def stamp_epoch(stamp: Stamp, window: Window) -> float | None:
    """Epoch seconds of a log stamp, its year the one (window's, or a neighbour) nearest the
    window start; None for a date no such year has (Feb 29)."""
    year = datetime.fromtimestamp(window.start, window.zone).year
    best: float | None = None
    for candidate in (year - 1, year, year + 1):
        try:
            day = datetime(candidate, stamp.month, stamp.day, tzinfo=window.zone)
        except ValueError:
            continue
        # aware + timedelta is wall-clock arithmetic: a zone's DST offset is the one then
        epoch = (day + timedelta(seconds=stamp.second)).timestamp()
        if best is None or abs(epoch - window.start) < abs(best - window.start):
            best = epoch
    return best


def inside(interval: Interval, window: Window) -> bool:
    """Whether the interval surely lies inside the window (see the module docstring)."""
    if interval.stamp is None or interval.previous is None:
        return False
    began = stamp_epoch(interval.previous, window)
    ended = stamp_epoch(interval.stamp, window)
    if began is None or ended is None:
        return False
    return began >= window.start and ended + interval.stamp.resolution <= window.end


def window_metrics(
    intervals: list[Interval], window: Window
) -> tuple[dict[str, float], dict[str, Any]]:
    """log_gen_throughput (median over the window's intervals with generation, summed over
    engines), log_accept_len (drafted-weighted mean of its SpecDecoding lines) and
    log_draft_acceptance_rate (accepted / drafted), and what they were made of."""
    return interval_metrics([i for i in intervals if inside(i, window)])


def interval_metrics(chosen: list[Interval]) -> tuple[dict[str, float], dict[str, Any]]:
    """The log_* metrics of some intervals (see `window_metrics`), and what they came from."""
    metrics: dict[str, float] = {}
    detail: dict[str, Any] = {"intervals": len(chosen)}
    by_engine: dict[str, list[float]] = {}
    for interval in chosen:
        # Only whole intervals under load: one the client's start-up or the last requests'
        # drain cut short averages idle time in (a 2 s repeat read 19-29 % low). Lines that do
        # not say what was running fall back to "generated something".
        loaded = interval.under_load
        if loaded is False:
            if interval.gen_throughput > 0:
                detail["partly_idle"] = detail.get("partly_idle", 0) + 1
            continue
        if interval.gen_throughput > 0:
            by_engine.setdefault(interval.engine, []).append(interval.gen_throughput)
    if by_engine:
        metrics["log_gen_throughput"] = sum(statistics.median(v) for v in by_engine.values())
        detail["engines"] = len(by_engine)
    spec = [i.spec for i in chosen if i.spec]
    detail["spec_lines"] = len(spec)
    metrics.update(acceptance(spec))
    return metrics, detail


def acceptance(rows: list[dict[str, Any]]) -> dict[str, float]:
    """log_accept_len and log_draft_acceptance_rate of SpecDecoding lines: the mean acceptance
    length weighted by drafted tokens (drafts × k: exact over the lines), else a plain mean."""
    out: dict[str, float] = {}
    lengths = [r for r in rows if "mean_acceptance_length" in r]
    if lengths:
        weights = [r.get("drafted_tokens", 0.0) for r in lengths]
        values = [r["mean_acceptance_length"] for r in lengths]
        if all(w > 0 for w in weights):
            out["log_accept_len"] = sum(v * w for v, w in zip(values, weights, strict=True)) / sum(
                weights
            )
        else:
            out["log_accept_len"] = statistics.fmean(values)
    accepted = sum(r.get("accepted_tokens", 0.0) for r in rows)
    drafted = sum(r.get("drafted_tokens", 0.0) for r in rows)
    if drafted > 0:
        out["log_draft_acceptance_rate"] = accepted / drafted
    return out


_CACHE: dict[tuple[str, int, int], ServerLog] = {}


def read_log(path: Path) -> ServerLog | None:
    """parse_log of a server.log, parsed once per file version (each repeat reads it)."""
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in _CACHE:
            text = path.read_text(encoding="utf-8", errors="replace")
            _CACHE.clear()  # one log at a time: cells are scored one after another
            _CACHE[key] = parse_log(text)
        return _CACHE[key]
    except OSError:
        return None


def utc_text(epoch: float) -> str:
    """An epoch as UTC ISO text, for facts a person reads."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")
