"""Greedy outputs compared: which prompts changed, the headline, refusals where two
fingerprints cannot be compared, passes of one server that disagree, the speculative check,
metrics.json's summary, and `expect: {fingerprint: {equal}}`."""

from __future__ import annotations

from typing import Any

from orchestrator.analyze.expect import check_all
from orchestrator.analyze.outputs import (
    compare_fingerprints,
    outputs_summary,
    prompt_label,
    speculates,
    speculative_warning,
    unstable_passes,
)
from orchestrator.cell import Expectation


def fingerprint(hashes: list[str], **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "set": "orch-prompts-v1",
        "max_tokens": 16,
        "hashed": "token_ids",
        "prompts": len(hashes),
        "outputs": [{"hash": h, "text": f"answer {h}"} for h in hashes],
    }
    doc.update(over)
    return doc


def test_the_prompts_whose_answers_changed_are_named_and_counted() -> None:
    a = fingerprint([f"h{i}" for i in range(32)])
    b = fingerprint([f"h{i}" if i % 5 else f"x{i}" for i in range(32)])
    change = compare_fingerprints(a, b)
    assert change.changed == (0, 5, 10, 15, 20, 25, 30)
    assert change.headline == "outputs changed on 7 of 32 prompts"
    same = compare_fingerprints(a, fingerprint([f"h{i}" for i in range(32)]))
    assert same.changed == () and same.headline == "outputs unchanged on 32 prompts"
    assert prompt_label(0) == "prompt 0 ('The capital of France is')"


def test_fingerprints_of_other_prompts_lengths_or_hashes_are_not_compared() -> None:
    a = fingerprint(["a", "b"])
    for key, value in (("max_tokens", 8), ("set", "other"), ("hashed", "text")):
        change = compare_fingerprints(a, fingerprint(["a", "c"], **{key: value}))
        assert change.why_not is not None and change.changed == ()
        assert change.headline.startswith("outputs not compared:")
    assert compare_fingerprints(a, fingerprint([])).why_not == "a fingerprint holds no outputs"


def test_passes_of_one_server_that_disagree_are_named() -> None:
    fp = fingerprint(["a", "b", "c"], passes=[{"hashes": ["a", "b", "c"]}] * 2)
    assert unstable_passes(fp) == []
    fp["passes"] = [{"hashes": ["a", "b", "c"]}, {"hashes": ["a", "x", "c"]}]
    assert unstable_passes(fp) == [1]
    assert unstable_passes(fingerprint(["a"])) == []


def test_a_speculative_cell_whose_outputs_left_its_twin_is_warned_about() -> None:
    spec = {"server": {"args": {"speculative-algorithm": "EAGLE3"}}}
    vllm = {"server": {"args": {"speculative_config": '{"method": "eagle3"}'}}}
    plain: dict[str, Any] = {"server": {"args": {"speculative-algorithm": None}}}
    assert speculates(spec) and speculates(vllm) and not speculates(plain)
    changed = compare_fingerprints(fingerprint(["a", "b"]), fingerprint(["a", "c"]))
    warning = speculative_warning(plain, spec, changed)
    assert warning is not None and warning.startswith("B decodes speculatively")
    assert "1 of 2 prompts" in warning
    assert speculative_warning(spec, spec, changed) is None  # both speculate: no promise
    same = compare_fingerprints(fingerprint(["a"]), fingerprint(["a"]))
    assert speculative_warning(plain, spec, same) is None


def test_the_summary_and_an_equal_expectation() -> None:
    doc = {
        "fingerprint": {**fingerprint(["a"]), "digest": "d1", "stable": True},
        "accuracy": {"accuracy": 0.75, "questions": 8},
    }
    summary = outputs_summary(doc)
    assert summary == {
        "fingerprint": "d1",
        "prompts": 1,
        "hashed": "token_ids",
        "stable": True,
        "accuracy": 0.75,
        "questions": 8,
    }
    assert outputs_summary(None) == {}
    expect = {"fingerprint": Expectation(equal="d1"), "accuracy": Expectation(min=0.8)}
    ok, low = check_all(expect, {"accuracy": 0.75}, {"fingerprint": "d1"})
    assert ok.ok and not low.ok
    (wrong,) = check_all({"fingerprint": Expectation(equal="d1")}, {}, {"fingerprint": "d2"})
    assert not wrong.ok and wrong.detail == "d2 != d1"
    (absent,) = check_all({"fingerprint": Expectation(equal="d1")}, {})
    assert not absent.ok and "not recorded" in absent.detail
