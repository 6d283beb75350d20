"""Greedy outputs compared: which prompts changed, the headline, refusals where two
fingerprints cannot be compared, passes of one server that disagree, the speculative check,
metrics.json's summary, `expect: {fingerprint: {equal}}` and `accuracy` through the verdict,
and a bisect on accuracy (a metric without spread)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyze_fixtures import base_cell, write_cell

from orchestrator.analyze.diff.cells import diff_cells
from orchestrator.analyze.diff.render import render_diff
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.expect import check_all
from orchestrator.analyze.history import better_of
from orchestrator.analyze.outputs import (
    compare_fingerprints,
    outputs_summary,
    prompt_label,
    speculates,
    speculative_warning,
    unstable_passes,
)
from orchestrator.analyze.verdict import score_cell
from orchestrator.cell import Cell, Expectation
from orchestrator.execute.bisect.search import Ends, bisect
from orchestrator.results.layout import OUTPUTS_JSON

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "bench_serving.2026.jsonl"


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


def _scored(tmp_path: Path, accuracy: float, digest: str) -> dict[str, Any]:
    """metrics.json of a two-repeat cell whose outputs.json holds `accuracy` and `digest`."""
    spec = base_cell()
    spec["bench"]["repeats"] = 2
    spec["bench"]["result_file"] = "result.jsonl"
    spec["expect"] = {"fingerprint": {"equal": "good"}, "accuracy": {"min": 0.9}}
    cell_dir = write_cell(tmp_path / digest, cell=spec)
    for n in (1, 2):
        (cell_dir / "bench" / str(n)).mkdir(parents=True)
        (cell_dir / "bench" / str(n) / "result.jsonl").write_text(FIXTURE.read_text())
    doc = {
        "fingerprint": {**fingerprint(["a", "b"]), "digest": digest},
        "accuracy": {"accuracy": accuracy, "questions": 4},
    }
    (cell_dir / OUTPUTS_JSON).write_text(json.dumps(doc))
    return score_cell(cell_dir, Cell.model_validate(spec)).metrics


def test_the_verdict_puts_accuracy_on_each_repeat_and_checks_the_digest(tmp_path: Path) -> None:
    good = _scored(tmp_path, 1.0, "good")
    assert [r["accuracy"] for r in good["repeats"]] == [1.0, 1.0]
    assert all(e["ok"] for e in good["expectations"]) and good["outputs"]["fingerprint"] == "good"
    bad = _scored(tmp_path, 0.75, "bad")
    assert {e["metric"]: e["ok"] for e in bad["expectations"]} == {
        "fingerprint": False,
        "accuracy": False,
    }


def test_bisect_on_accuracy_names_the_first_wrong_commit_though_it_has_no_spread() -> None:
    """Accuracy is the same on every repeat: the search's noise floor still decides each
    commit, and the confirmation names the first wrong one."""
    commits = [f"c{i}" for i in range(9)]

    def measure(sha: str, repeats: int, ends: Ends | None) -> list[float]:
        return [0.75 if int(sha[1:]) >= 6 else 1.0] * repeats

    found = bisect(commits, measure)
    assert (found.first_bad, found.last_good, found.confirmed) == ("c6", "c5", True)


def test_diff_says_the_changed_outputs_first_and_warns_of_a_speculative_twin(
    tmp_path: Path,
) -> None:
    plain = base_cell("plain-1a2b3c4d", args={"model-path": "/m", "port": 30000})
    spec = base_cell(
        "spec-1a2b3c4d",
        args={"model-path": "/m", "port": 30000, "speculative-algorithm": "EAGLE3"},
    )
    cells = []
    for cell, hashes in ((plain, ["a", "b", "c"]), (spec, ["a", "x", "c"])):
        path = write_cell(tmp_path, cell=cell, repeats=[{"output_throughput": 90.0}] * 2)
        doc = {"fingerprint": {**fingerprint(hashes), "digest": "".join(hashes)}}
        (path / OUTPUTS_JSON).write_text(json.dumps(doc))
        cells.append(CellEvidence.load(path))
    text = render_diff(diff_cells(cells[0], cells[1]))
    head, _, rest = text.partition("[outputs]")
    assert "outputs changed on 1 of 3 prompts" in head  # beside the cells' names
    assert "prompt 1 ('Once upon a time" in rest and "'answer b' -> 'answer x'" in rest
    assert "B decodes speculatively" in rest


def test_history_calls_an_accuracy_drop_a_regression() -> None:
    assert better_of("accuracy") == "higher"
