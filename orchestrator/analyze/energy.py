"""What the GPUs did during each repeat: energy, clocks, temperature, throttling, from telemetry.

Pure functions over a cell's `telemetry.csv` (written by `orchestrator.runner.telemetry`): one row
per GPU per sample, `t` in epoch seconds on the clock the runner stamps repeat start and end with.
Power is integrated with the trapezoid rule, clipped to a window with linear interpolation at its
edges; clock-event reasons are a step signal, each sample holding until the next one.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from statistics import median

from orchestrator.runner.probe.shape import CLOCK_EVENT_REASONS

_REASON_BITS = dict(CLOCK_EVENT_REASONS)  # NVML's bits, from the probe's one declared table
# Set on a healthy GPU (idle, or clocks the admin chose): not throttling.
NORMAL_REASONS = 0x1 | 0x2
_BEFORE_S = 30.0  # an episode's "before" clock: unthrottled samples this long before it
_COLUMNS = {
    "sm": ("clocks.sm", "clocks.current.sm"),
    "power": ("power.draw",),
    "temp": ("temperature.gpu",),
    "util": ("utilization.gpu",),
    "reasons": ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
}


@dataclass
class GpuSeries:
    """One GPU's samples, in time order; None where nvidia-smi had no value."""

    t: list[float] = field(default_factory=list)
    sm: list[float | None] = field(default_factory=list)
    power: list[float | None] = field(default_factory=list)
    temp: list[float | None] = field(default_factory=list)
    util: list[float | None] = field(default_factory=list)
    reasons: list[int] = field(default_factory=list)


@dataclass
class Telemetry:
    """A cell's telemetry by GPU index."""

    gpus: dict[int, GpuSeries] = field(default_factory=dict)

    @property
    def interval_s(self) -> float:
        """The median time between samples of one GPU (0 with fewer than two)."""
        gaps = [b - a for s in self.gpus.values() for a, b in pairwise(s.t)]
        return median(gaps) if gaps else 0.0


@dataclass(frozen=True)
class RepeatWindow:
    """One bench repeat: warmup or measure, its number, start and end on the telemetry clock."""

    kind: str
    n: int
    start: float
    end: float
    output_tokens: float | None = None


@dataclass(frozen=True)
class ThrottleEpisode:
    """A contiguous span in which some GPU reported a throttling clock-event reason."""

    start: float
    end: float
    reasons: tuple[str, ...]
    gpus: tuple[int, ...]
    sm_clock_before_mhz: float | None
    sm_clock_min_mhz: float | None
    measured_overlap_s: float
    measured_repeats: tuple[int, ...]

    @property
    def seconds(self) -> float:
        """How long the episode lasted."""
        return self.end - self.start

    @property
    def clock_drop_mhz(self) -> float | None:
        """How far the SM clock fell below where it was outside episodes."""
        if self.sm_clock_before_mhz is None or self.sm_clock_min_mhz is None:
            return None
        return max(0.0, self.sm_clock_before_mhz - self.sm_clock_min_mhz)

    def to_dict(self) -> dict[str, object]:
        """The episode as `orch diff` and the bundle show it."""
        return {
            "start": round(self.start, 3),
            "seconds": round(self.seconds, 3),
            "reasons": list(self.reasons),
            "gpus": list(self.gpus),
            "sm_clock_before_mhz": self.sm_clock_before_mhz,
            "sm_clock_min_mhz": self.sm_clock_min_mhz,
            "clock_drop_mhz": self.clock_drop_mhz,
            "measured_overlap_s": round(self.measured_overlap_s, 3),
            "measured_repeats": list(self.measured_repeats),
        }


def reason_names(mask: int) -> list[str]:
    """The NVML reason names set in `mask`, lowest bit first (`bit_0x...` for unknown bits)."""
    return [_REASON_BITS.get(bit, f"bit_{bit:#x}") for bit in _bits(mask)]


def _bits(mask: int) -> list[int]:
    bits, bit = [], 1
    while bit <= mask:
        if mask & bit:
            bits.append(bit)
        bit <<= 1
    return bits


# ---- reading ---------------------------------------------------------------------------------


def _number(text: str) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _mask(text: str) -> int:
    try:
        return int(text, 16) if text else 0
    except ValueError:
        return 0


def parse_telemetry(text: str) -> Telemetry:
    """Telemetry from a `telemetry.csv`'s text; rows it cannot read are skipped."""
    lines = text.splitlines()
    if not lines:
        return Telemetry()
    header = lines[0].split(",")
    where = {name: i for i, name in enumerate(header)}
    if "t" not in where or "index" not in where:
        return Telemetry()
    cols = {k: next((where[n] for n in names if n in where), None) for k, names in _COLUMNS.items()}
    it, ii = where["t"], where["index"]
    isc, ip, ite, iu, ir = cols["sm"], cols["power"], cols["temp"], cols["util"], cols["reasons"]
    width = len(header)
    gpus: dict[int, GpuSeries] = {}
    for line in lines[1:]:
        row = line.split(",")
        if len(row) != width:
            continue
        try:
            t, gpu = float(row[it]), int(row[ii])
        except ValueError:
            continue
        s = gpus.get(gpu)
        if s is None:
            s = gpus[gpu] = GpuSeries()
        s.t.append(t)
        s.sm.append(_number(row[isc]) if isc is not None else None)
        s.power.append(_number(row[ip]) if ip is not None else None)
        s.temp.append(_number(row[ite]) if ite is not None else None)
        s.util.append(_number(row[iu]) if iu is not None else None)
        s.reasons.append(_mask(row[ir]) if ir is not None else 0)
    for s in gpus.values():
        if any(b < a for a, b in pairwise(s.t)):
            order = sorted(range(len(s.t)), key=s.t.__getitem__)
            for name in ("t", "sm", "power", "temp", "util", "reasons"):
                values = getattr(s, name)
                setattr(s, name, [values[i] for i in order])
    return Telemetry(dict(sorted(gpus.items())))


def read_telemetry(path: Path) -> Telemetry:
    """Telemetry from a `telemetry.csv` file (empty when the file is absent)."""
    return parse_telemetry(path.read_text(encoding="utf-8")) if path.exists() else Telemetry()


# ---- integrals over a window -----------------------------------------------------------------


def _points(t: Sequence[float], v: Sequence[float | None]) -> tuple[list[float], list[float]]:
    pairs = [(a, b) for a, b in zip(t, v, strict=True) if b is not None]
    return [a for a, _ in pairs], [b for _, b in pairs]


def _at(ts: Sequence[float], vs: Sequence[float], x: float, i: int) -> float:
    """Linear interpolation at x, with ts[i-1] <= x <= ts[i]."""
    t0, t1 = ts[i - 1], ts[i]
    return vs[i] if t1 == t0 else vs[i - 1] + (vs[i] - vs[i - 1]) * (x - t0) / (t1 - t0)


def _clipped(
    ts: Sequence[float], vs: Sequence[float], a: float, b: float
) -> tuple[list[float], list[float]]:
    """The polyline restricted to [a, b] ∩ [first sample, last sample], edges interpolated."""
    if len(ts) < 2:
        return [], []
    lo, hi = max(a, ts[0]), min(b, ts[-1])
    if hi <= lo:
        return [], []
    i = bisect.bisect_right(ts, lo)
    j = bisect.bisect_left(ts, hi)
    i = min(max(i, 1), len(ts) - 1)
    j = min(max(j, 1), len(ts) - 1)
    xs = [lo, *ts[i:j], hi]
    ys = [_at(ts, vs, lo, i), *vs[i:j], _at(ts, vs, hi, j)]
    return xs, ys


def _trapezoid(xs: Sequence[float], ys: Sequence[float]) -> float:
    return sum((xs[k + 1] - xs[k]) * (ys[k] + ys[k + 1]) / 2 for k in range(len(xs) - 1))


def _held_spans(t: Sequence[float], on: Sequence[bool]) -> list[tuple[float, float]]:
    """Spans over which a sample-and-hold flag stayed set, merged."""
    if not t:
        return []
    gaps = [y - x for x, y in pairwise(t)]
    tail = median(gaps) if gaps else 0.0
    spans: list[tuple[float, float]] = []
    for k, flag in enumerate(on):
        if not flag:
            continue
        s, e = t[k], t[k + 1] if k + 1 < len(t) else t[k] + tail
        if spans and spans[-1][1] >= s:
            spans[-1] = (spans[-1][0], max(spans[-1][1], e))
        else:
            spans.append((s, e))
    return spans


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def _overlap(spans: Iterable[tuple[float, float]], a: float, b: float) -> float:
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e in spans)


# ---- per repeat ------------------------------------------------------------------------------


@dataclass
class _Signals:
    """What every window reads, computed once: per GPU (t, value) points; throttle spans."""

    power: list[tuple[list[float], list[float]]]
    sm: list[tuple[list[float], list[float]]]
    util: list[tuple[list[float], list[float]]]
    temp: list[tuple[list[float], list[float]]]
    by_reason: dict[str, list[tuple[float, float]]]
    any_reason: list[tuple[float, float]]


def _signals(tel: Telemetry, gpus: Collection[int] | None) -> _Signals:
    series = [s for g, s in tel.gpus.items() if gpus is None or g in gpus]
    by_reason: dict[str, list[tuple[float, float]]] = {}
    for s in series:
        throttled = [m & ~NORMAL_REASONS for m in s.reasons]
        for bit in {bit for m in throttled for bit in _bits(m)}:
            name = _REASON_BITS.get(bit, f"bit_{bit:#x}")
            spans = _held_spans(s.t, [bool(m & bit) for m in throttled])
            by_reason.setdefault(name, []).extend(spans)
    return _Signals(
        power=[_points(s.t, s.power) for s in series],
        sm=[_points(s.t, s.sm) for s in series],
        util=[_points(s.t, s.util) for s in series],
        temp=[_points(s.t, s.temp) for s in series],
        by_reason={name: _union(spans) for name, spans in sorted(by_reason.items())},
        any_reason=_union(sp for spans in by_reason.values() for sp in spans),
    )


def window_metrics(
    tel: Telemetry, window: RepeatWindow, gpus: Collection[int] | None = None
) -> dict[str, float]:
    """The telemetry metrics of one repeat (keys absent where the telemetry says nothing).

    energy_j (summed over GPUs), power_mean_w (per GPU), sm_clock_mean_mhz (time-weighted),
    sm_clock_min_mhz, temperature_max_c, utilization_mean_pct, throttle_s (any throttling reason
    on any GPU) and throttle_s.<reason>, telemetry_coverage (fraction of the window sampled), and
    joules_per_output_token / output_tokens_per_joule when the window has output tokens. `gpus`
    restricts it to the GPUs a cell used (default: every GPU sampled).
    """
    return _window(_signals(tel, gpus), window)


def _window(sig: _Signals, window: RepeatWindow) -> dict[str, float]:
    a, b = window.start, window.end
    if b <= a:
        return {}
    out: dict[str, float] = {}
    energy, powered, covered = 0.0, 0, 0.0
    for ts, vs in sig.power:
        xs, ys = _clipped(ts, vs, a, b)
        if xs:
            energy += _trapezoid(xs, ys)
            powered += 1
            covered = max(covered, xs[-1] - xs[0])
    if powered:
        out["energy_j"] = energy
        out["power_mean_w"] = energy / covered / powered if covered > 0 else 0.0
    clock_area, clock_span, lows = 0.0, 0.0, []
    for ts, vs in sig.sm:
        xs, ys = _clipped(ts, vs, a, b)
        if xs:
            clock_area += _trapezoid(xs, ys)
            clock_span += xs[-1] - xs[0]
            lows.append(min(ys))
    if clock_span > 0:
        out["sm_clock_mean_mhz"] = clock_area / clock_span
        out["sm_clock_min_mhz"] = min(lows)
    highs = [max(ys) for ts, vs in sig.temp for xs, ys in [_clipped(ts, vs, a, b)] if xs]
    if highs:
        out["temperature_max_c"] = max(highs)
    util_area, util_span = 0.0, 0.0
    for ts, vs in sig.util:
        xs, ys = _clipped(ts, vs, a, b)
        if xs:
            util_area += _trapezoid(xs, ys)
            util_span += xs[-1] - xs[0]
    if util_span > 0:
        out["utilization_mean_pct"] = util_area / util_span
    if sig.power or sig.sm:
        out["throttle_s"] = _overlap(sig.any_reason, a, b)
        for name, spans in sig.by_reason.items():
            seconds = _overlap(spans, a, b)
            if seconds > 0:
                out[f"throttle_s.{name}"] = seconds
        out["telemetry_coverage"] = covered / (b - a) if powered else 0.0
    tokens = window.output_tokens
    if tokens and "energy_j" in out and out["energy_j"] > 0:
        out["joules_per_output_token"] = out["energy_j"] / tokens
        out["output_tokens_per_joule"] = tokens / out["energy_j"]
    return out


def repeat_metrics(
    tel: Telemetry, windows: Iterable[RepeatWindow], gpus: Collection[int] | None = None
) -> dict[tuple[str, int], dict[str, float]]:
    """`window_metrics` for each repeat, by (kind, n); the signals are prepared once."""
    sig = _signals(tel, gpus)
    return {(w.kind, w.n): _window(sig, w) for w in windows}


# ---- throttle episodes -----------------------------------------------------------------------


def throttle_episodes(
    tel: Telemetry, windows: Iterable[RepeatWindow] = (), normal: int = NORMAL_REASONS
) -> list[ThrottleEpisode]:
    """Contiguous spans in which any GPU reported a reason outside `normal`, in time order.

    Each names its reasons and GPUs, the SM clock outside episodes (median over the affected GPUs'
    samples with no throttling reason) and the lowest during it, and how long it overlapped the
    measured repeats (and which).
    """
    measured = [w for w in windows if w.kind == "measure"]
    per_gpu: dict[int, list[tuple[float, float]]] = {}
    for gpu, s in tel.gpus.items():
        per_gpu[gpu] = _held_spans(s.t, [bool(m & ~normal) for m in s.reasons])
    episodes = []
    for start, end in _union(sp for spans in per_gpu.values() for sp in spans):
        gpus = tuple(g for g, spans in per_gpu.items() if _overlap(spans, start, end) > 0)
        mask, during, before, calm = 0, [], [], []
        for g in gpus:
            s = tel.gpus[g]
            for t, sm, m in zip(s.t, s.sm, s.reasons, strict=True):
                if start <= t < end:
                    mask |= m & ~normal
                    if sm is not None:
                        during.append(sm)
                elif not m & ~normal and sm is not None:
                    calm.append(sm)
                    if start - _BEFORE_S <= t < start:
                        before.append(sm)
        before = before or calm
        overlap = {w.n: max(0.0, min(w.end, end) - max(w.start, start)) for w in measured}
        episodes.append(
            ThrottleEpisode(
                start=start,
                end=end,
                reasons=tuple(reason_names(mask)),
                gpus=gpus,
                sm_clock_before_mhz=median(before) if before else None,
                sm_clock_min_mhz=min(during) if during else None,
                measured_overlap_s=sum(overlap.values()),
                measured_repeats=tuple(n for n, sec in sorted(overlap.items()) if sec > 0),
            )
        )
    return episodes


def energy_summary(metrics: Mapping[tuple[str, int], Mapping[str, float]]) -> dict[str, float]:
    """Measured repeats' mean energy metrics (what a report's energy column shows)."""
    keys = ("energy_j", "joules_per_output_token", "output_tokens_per_joule")
    out = {}
    for key in keys:
        values = [m[key] for (kind, _), m in metrics.items() if kind == "measure" and key in m]
        if values:
            out[key] = sum(values) / len(values)
    return out
