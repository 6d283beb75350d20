"""The server start as the unit of replication (Kalibera & Jones 2013; Hurlbert 1984).

Repeats against one server start share its memory placement, clocks, CUDA-graph capture and
autotuning: they are not independent replicates of a configuration. Given a metric's values and
the server start each came from, `start_spread` estimates the two levels of noise (one-way random
effects, the ANOVA estimator: within-start and between-start variance) and the effective number
of replicates; `compare_starts` compares two cells with the start as the unit (each start's mean,
then Welch's t on the start means). Values are taken on the log scale, so every sd is relative
(0.01 is 1 %) and a comparison is a ratio.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.analyze.student import t_two_sided

NOT_MEASURED = "one server start: start-to-start spread not measured"
ONE_START_EACH = (
    "one start each: start-to-start spread not measured; the comparison's error rate holds "
    "only if it is small"
)


@dataclass(frozen=True)
class StartSpread:
    """The two levels of a metric's noise, over `starts` server starts and `repeats` values.

    `within_sd` and `between_sd` are relative (log scale); `between_sd` is None with one start
    (not measured). `effective_n` is how many independent values the repeats are worth (the
    design effect: n / (1 + (n0 - 1) * icc)); None with one start.
    """

    starts: int
    repeats: int
    within_sd: float | None
    between_sd: float | None
    icc: float | None  # the share of the variance between starts
    effective_n: float | None
    log_scale: bool = True

    @property
    def measured(self) -> bool:
        """True when there were at least two starts to tell the levels apart."""
        return self.between_sd is not None

    def text(self) -> str:
        """One line: the spread between starts and within them, or that it was not measured."""
        if not self.measured:
            within = f" (within-start sd {_pct(self.within_sd)})" if self.within_sd else ""
            return NOT_MEASURED + within
        eff = f"; {self.effective_n:.1f} effective replicates of {self.repeats}"
        return (
            f"{self.starts} server starts: start-to-start sd {_pct(self.between_sd)}, "
            f"within-start sd {_pct(self.within_sd)}" + (eff if self.effective_n else "")
        )

    def as_dict(self) -> dict[str, object]:
        """The spread as plain data (metrics.json, diff JSON)."""
        return {
            "starts": self.starts,
            "repeats": self.repeats,
            "between_start_sd": self.between_sd,
            "within_start_sd": self.within_sd,
            "icc": self.icc,
            "effective_replicates": self.effective_n,
            "scale": "log" if self.log_scale else "relative",
        }


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{100.0 * value:.2f} %"


def _scaled(values: Sequence[float], relative: bool = True) -> tuple[list[float], bool]:
    """Logs when every value is positive (sds become relative), else the values over |mean|
    (`relative`) or as they are; whether logs were taken."""
    xs = [float(v) for v in values]
    if xs and all(v > 0 for v in xs):
        return [math.log(v) for v in xs], True
    centre = abs(sum(xs) / len(xs)) if xs and relative else 0.0
    return ([v / centre for v in xs] if centre else xs), False


def _groups(values: Sequence[float], starts: Sequence[Hashable]) -> list[list[float]]:
    if len(values) != len(starts):
        raise ValueError(f"{len(values)} values but {len(starts)} start ids")
    groups: dict[Hashable, list[float]] = {}
    for value, start in zip(values, starts, strict=True):
        groups.setdefault(start, []).append(value)
    return list(groups.values())


def start_spread(values: Sequence[float], starts: Sequence[Hashable]) -> StartSpread:
    """Within- and between-start variance of `values` (start ids in `starts`, same order):
    one-way random effects, ANOVA (method of moments) estimator for unbalanced groups,
    a negative between-start estimate set to 0."""
    scaled, log_scale = _scaled(values)
    groups = _groups(scaled, starts)
    n, k = len(scaled), len(groups)
    means = [sum(g) / len(g) for g in groups]
    ss_within = math.fsum((x - mu) ** 2 for g, mu in zip(groups, means, strict=True) for x in g)
    df_within = n - k
    ms_within = ss_within / df_within if df_within > 0 else None
    within_sd = math.sqrt(ms_within) if ms_within is not None else None
    if k < 2:
        return StartSpread(k, n, within_sd, None, None, None, log_scale)
    grand = math.fsum(scaled) / n
    ms_between = math.fsum(
        len(g) * (mu - grand) ** 2 for g, mu in zip(groups, means, strict=True)
    ) / (k - 1)
    n0 = (n - math.fsum(len(g) ** 2 for g in groups) / n) / (k - 1)
    if ms_within is None:  # one value per start: only the total spread is known
        between_var = ms_between
        icc = 1.0
    else:
        between_var = max(0.0, (ms_between - ms_within) / n0)
        total = between_var + ms_within
        icc = between_var / total if total > 0 else 0.0
    effective = n / (1.0 + (n0 - 1.0) * icc)
    return StartSpread(k, n, within_sd, math.sqrt(between_var), icc, effective, log_scale)


@dataclass(frozen=True)
class StartComparison:
    """Cell B against cell A with the server start as the unit.

    `ratio` is B over A (geometric means of the start means); `p_value` is from Welch's t on
    the start means (Student's pooled t where one side has one start; None with one start each,
    where `note` says the comparison cannot hold its rate)."""

    ratio: float | None
    p_value: float | None
    significant: bool
    starts_a: int
    starts_b: int
    method: str
    note: str = ""

    def text(self) -> str:
        """One line for a person."""
        change = "?" if self.ratio is None else f"{(self.ratio - 1.0) * 100.0:+.2f} %"
        if self.p_value is None:
            return f"{change} ({self.starts_a} v {self.starts_b} starts): {self.note}"
        word = "significant" if self.significant else "not significant"
        extra = f"; {self.note}" if self.note else ""
        return (
            f"{change}, {word} (p {self.p_value:.3g}, {self.method} on start means, "
            f"{self.starts_a} v {self.starts_b} starts){extra}"
        )


def start_means(values: Sequence[float], starts: Sequence[Hashable]) -> list[float]:
    """Each server start's mean of the values on the log scale (one number per start)."""
    scaled, _ = _scaled(values, relative=False)
    return [sum(g) / len(g) for g in _groups(scaled, starts)]


def _mean_var(xs: Sequence[float]) -> tuple[float, float]:
    mu = math.fsum(xs) / len(xs)
    var = math.fsum((x - mu) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0
    return mu, var


def compare_starts(
    a_values: Sequence[float],
    a_starts: Sequence[Hashable],
    b_values: Sequence[float],
    b_starts: Sequence[Hashable],
    alpha: float = 0.05,
) -> StartComparison:
    """Compare cell B with cell A counting server starts, not repeats: each start's mean (of
    logs), then Welch's t on the start means (Student's pooled t when one side has a single
    start, which assumes equal start-to-start spread). One start each: no test, said."""
    a_scaled, a_log = _scaled(a_values, relative=False)
    b_scaled, b_log = _scaled(b_values, relative=False)
    log = a_log and b_log
    if not log:  # mixed signs: compare raw values
        a_scaled, b_scaled = [float(v) for v in a_values], [float(v) for v in b_values]
    am = [sum(g) / len(g) for g in _groups(a_scaled, a_starts)]
    bm = [sum(g) / len(g) for g in _groups(b_scaled, b_starts)]
    ka, kb = len(am), len(bm)
    mu_a, var_a = _mean_var(am)
    mu_b, var_b = _mean_var(bm)
    if log:
        ratio: float | None = math.exp(mu_b - mu_a)
    else:
        ratio = mu_b / mu_a if mu_a else None
    if ka < 2 and kb < 2:
        return StartComparison(ratio, None, False, ka, kb, "none", ONE_START_EACH)
    diff = mu_b - mu_a
    note = ""
    if ka >= 2 and kb >= 2:
        method = "Welch's t"
        se2 = var_a / ka + var_b / kb
        df = (
            se2**2 / ((var_a / ka) ** 2 / (ka - 1) + (var_b / kb) ** 2 / (kb - 1))
            if se2 > 0
            else float(ka + kb - 2)
        )
    else:
        method = "Student's t"
        note = "one side has one start: its start-to-start spread is taken from the other"
        df = float(ka + kb - 2)
        pooled = ((ka - 1) * var_a + (kb - 1) * var_b) / df
        se2 = pooled * (1.0 / ka + 1.0 / kb)
    # identical start means on both sides: no spread at all to judge a difference against
    exact = 1.0 if diff == 0 else 0.0
    p = t_two_sided(diff / math.sqrt(se2), df) if se2 > 0 else exact
    return StartComparison(ratio, p, p < alpha, ka, kb, method, note)


def starts_document(
    repeats: Sequence[Mapping[str, Any]], start_of: Mapping[int, int]
) -> dict[str, Any]:
    """metrics.json's `starts`: the server start of each measured repeat (by its number `n`)
    and, per metric, the spread between and within starts (`StartSpread.as_dict`)."""
    spreads: dict[str, Any] = {}
    names: dict[str, None] = {}
    for repeat in repeats:
        names.update((k, None) for k in repeat if k != "n")
    for name in names:
        pairs = [
            (float(r[name]), start_of[int(r["n"])])
            for r in repeats
            if _finite(r.get(name)) and int(r["n"]) in start_of
        ]
        if len(pairs) >= 2:
            values, ids = zip(*pairs, strict=True)
            spreads[name] = start_spread(values, ids).as_dict()
    count = len(set(start_of.values()))
    return {
        "count": count,
        "of_repeat": {str(n): s for n, s in sorted(start_of.items())},
        "metrics": spreads,
    }


def recorded_spread(metrics: Mapping[str, Any], metric: str) -> StartSpread | None:
    """A metric's start spread as metrics.json recorded it (`starts_document`); None where
    the cell has no `starts` record (one start, or a bundle from before `bench.starts`)."""
    starts = metrics.get("starts")
    if not isinstance(starts, Mapping):
        return None
    entry = (starts.get("metrics") or {}).get(metric)
    if not isinstance(entry, Mapping):
        return None

    def number(key: str) -> float | None:
        value = entry.get(key)
        return float(value) if value is not None and _finite(value) else None

    return StartSpread(
        starts=int(entry.get("starts") or 0),
        repeats=int(entry.get("repeats") or 0),
        within_sd=number("within_start_sd"),
        between_sd=number("between_start_sd"),
        icc=number("icc"),
        effective_n=number("effective_replicates"),
        log_scale=entry.get("scale") == "log",
    )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def starts_footer(cells: Sequence[tuple[str, Mapping[str, Any]]], metric: str) -> list[str]:
    """The report's lines on the start-to-start spread of `metric`, from (cell id, its
    metrics.json): each cell measured over several starts with its spread, then how many
    were measured on one start (their spread not measured)."""
    lines: list[str] = []
    single = 0
    for cell_id, metrics in cells:
        spread = recorded_spread(metrics, metric)
        if spread is not None and spread.measured:
            lines.append(f"{cell_id} {metric}: {spread.text()}")
        else:
            single += 1
    if single:
        lines.append(
            f"{single} cell(s) on one server start each: start-to-start spread not measured; "
            "their differences hold only if it is small (bench.starts: N measures it)"
        )
    return lines


def values_and_starts(metrics: Mapping[str, Any], metric: str) -> tuple[list[float], list[int]]:
    """A metric's finite values over a cell's measured repeats and the server start of each
    (metrics.json's `starts.of_repeat`; start 1 for all where the cell ran on one start)."""
    of_repeat = (metrics.get("starts") or {}).get("of_repeat") or {}
    values: list[float] = []
    ids: list[int] = []
    for repeat in metrics.get("repeats") or []:
        if isinstance(repeat, Mapping) and _finite(repeat.get(metric)):
            values.append(float(repeat[metric]))
            ids.append(int(of_repeat.get(str(repeat.get("n")), 1)))
    return values, ids
