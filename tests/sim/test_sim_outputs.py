"""The simulator's greedy answers: fixed by (model, prompt, repo code), right on the bundled
arithmetic without a bug, and changed on the share of prompts `wrong-output` says, on a commit
that is also faster."""

from __future__ import annotations

from pathlib import Path

from orchestrator.runner.outputs import first_number
from orchestrator.runner.prompts import arithmetic_questions
from orchestrator.sim import model as m
from orchestrator.sim.outputs import answer, is_wrong
from orchestrator.sim.repo import apply_bug, init_repo


def test_answers_are_fixed_by_model_prompt_and_code() -> None:
    clean = m.model_params()
    assert answer("m", "p q", clean, 8) == answer("m", "p q", clean, 8)
    assert answer("m", "p q", clean, 8) != answer("other", "p q", clean, 8)
    text, ids = answer("m", "p q", clean, 8)
    assert len(text.split()) == 8 == len(ids)
    assert answer("m", "p q", clean, 4)[1] == ids[:4]  # greedy: a shorter answer is a prefix


def test_the_bug_changes_its_share_of_prompts_and_the_arithmetic() -> None:
    buggy = apply_bug(m.model_params(), "wrong-output:0.3")
    prompts = [f"prompt number {i}" for i in range(4000)]
    share = sum(is_wrong(p, buggy) for p in prompts) / len(prompts)
    assert abs(share - 0.3) < 0.03  # 4000 fixed draws: sd 0.007
    for p in prompts[:50]:
        same = answer("m", p, m.model_params(), 6) == answer("m", p, buggy, 6)
        assert same != is_wrong(p, buggy)
    questions = arithmetic_questions(64)
    clean = [first_number(answer("m", q, m.model_params(), 4)[0]) == a for q, a in questions]
    assert all(clean)
    wrong = [first_number(answer("m", q, buggy, 4)[0]) == a for q, a in questions]
    assert wrong == [not is_wrong(q, buggy) for q, _ in questions]


def test_init_repo_plants_a_faster_wrong_commit(tmp_path: Path) -> None:
    info = init_repo(tmp_path / "r", commits=4, regress_at=3, bugs=("wrong-output",))
    params = m.load_params(info.path / m.MODEL_FILE)
    assert params["bugs"]["wrong_outputs"] == 0.25
    assert params["decode_ms"] < m.model_params()["decode_ms"]
    assert "Skip the logits soft-cap" in info.messages[2]
