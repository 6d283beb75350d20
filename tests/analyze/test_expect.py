from orchestrator.analyze.expect import check, check_all, describe
from orchestrator.cell import Expectation


def test_min_max_bounds() -> None:
    exp = Expectation(min=85.0)
    assert check("tput", exp, 89.0).ok
    res = check("tput", exp, 60.0)
    assert not res.ok and "60 < min 85" in res.detail


def test_reference_with_tolerance() -> None:
    exp = Expectation(ref=94.0, tolerance=0.05)
    assert describe(exp) == "94 ± 5%"
    assert check("tput", exp, 90.0).ok  # 94 * 0.95 = 89.3
    assert not check("tput", exp, 89.0).ok
    assert not check("tput", exp, 99.0).ok


def test_missing_metric_fails() -> None:
    results = check_all({"tput": Expectation(min=1.0)}, {})
    assert not results[0].ok and "not measured" in results[0].detail
