"""Student's t distribution without scipy: tails, two-sided p and quantiles, any (fractional)
degrees of freedom, as Welch-Satterthwaite gives them.

Through the regularized incomplete beta function, by its continued fraction (Lentz's method,
Numerical Recipes 6.4): P(|T| > t) = I_{df/(df+t^2)}(df/2, 1/2). One copy for every verdict that
uses a t test (investigate's intervals, bisect's confirmation, the start-level comparison, the
change points).
"""

from __future__ import annotations

import math
from statistics import NormalDist

_MAX_ITER = 300
_EPS = 1e-15
_TINY = 1e-300


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), evaluated by Lentz's method."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_ITER):
        m2 = 2 * m
        delta = 1.0
        for num in (
            m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _TINY else _TINY
            delta = d * c
            h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    # the fraction converges fast on the side of the mean; the symmetry covers the other
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_sf(t: float, dof: float) -> float:
    """P(T > t) for Student's t with `dof` degrees of freedom (infinite: the normal's)."""
    if math.isinf(dof):
        return 0.5 * math.erfc(t / math.sqrt(2.0))
    tail = 0.5 * regularized_beta(dof / 2.0, 0.5, dof / (dof + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_two_sided(t: float, dof: float) -> float:
    """P(|T| >= |t|); 1.0 where there is nothing to test (no degrees of freedom, t not a number)."""
    if dof <= 0 or math.isnan(t):
        return 1.0
    if math.isinf(dof):
        return min(1.0, math.erfc(abs(t) / math.sqrt(2.0)))
    return min(1.0, max(0.0, regularized_beta(dof / 2.0, 0.5, dof / (dof + t * t))))


def _t_pdf(t: float, dof: float) -> float:
    log_c = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    return math.exp(log_c - (dof + 1) / 2 * math.log1p(t * t / dof))


def t_quantile(p: float, dof: float) -> float:
    """The p-quantile of Student's t (0 < p < 1): Cornish-Fisher's start (Abramowitz and
    Stegun 26.7.5), then Newton's steps on `t_sf`."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile {p} is outside (0, 1)")
    z = NormalDist().inv_cdf(p)
    if math.isinf(dof):
        return z
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    t = z + g1 / dof + g2 / dof**2 + g3 / dof**3
    if dof < 3:  # the expansion is poor there; the exact forms are not
        if dof == 1:
            return math.tan(math.pi * (p - 0.5))
        if dof == 2:
            return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
        t = max(min(t, 50.0), -50.0)
    for _ in range(50):
        step = (p - (1.0 - t_sf(t, dof))) / _t_pdf(t, dof)
        t += step
        if abs(step) < 1e-12 * max(1.0, abs(t)):
            break
    return t
