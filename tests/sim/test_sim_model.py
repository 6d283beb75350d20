"""The performance model's numbers: orch's founding story (94 -> 60 tok/s), the formulas, and
what moves them."""

from __future__ import annotations

import statistics

import pytest

from orchestrator.sim import model as m

TUNED = {"NCCL_MIN_NCHANNELS": "32", "NCCL_CROSS_NIC": "1", "NCCL_ALGO": "Ring"}
BASE = m.ServingConfig(tp=8, disable_custom_all_reduce=True)
SPEC2 = m.ServingConfig(
    tp=8,
    disable_custom_all_reduce=True,
    speculative_algorithm="EAGLE3",
    num_steps=2,
    eagle_topk=1,
    num_draft_tokens=3,
)


def tok_s(params: dict[str, object], cfg: m.ServingConfig, env: dict[str, str]) -> float:
    return m.step_cost(params, cfg, env).tok_s


def test_design_story_numbers() -> None:
    good = m.model_params()
    bad = m.model_params({"eagle": {"verify_ms": 29.0}})
    assert tok_s(good, BASE, TUNED) == pytest.approx(89, abs=0.5)
    assert tok_s(good, SPEC2, TUNED) == pytest.approx(94, abs=0.5)
    assert tok_s(bad, SPEC2, TUNED) == pytest.approx(63.3, abs=0.5)
    # The verify regression leaves the baseline alone.
    assert tok_s(bad, BASE, TUNED) == pytest.approx(tok_s(good, BASE, TUNED))
    # The morning of the story: verify slower and the NCCL variables lost on the way.
    assert tok_s(good, BASE, {}) == pytest.approx(82, abs=0.5)
    assert tok_s(bad, SPEC2, {}) == pytest.approx(61.3, abs=0.5)


def test_accept_length_formula() -> None:
    assert m.accept_length([0.6, 0.56], 2) == pytest.approx(1 + 0.6 + 0.6 * 0.56)
    assert m.accept_length([0.5], 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert m.accept_length([0.9, 0.8], 0) == 1.0
    assert m.step_cost(m.model_params(), SPEC2, {}).accept_len == pytest.approx(1.936)
    # With topk 1 the chain is capped by the draft tokens verified.
    short = m.ServingConfig(speculative_algorithm="EAGLE3", num_steps=3, num_draft_tokens=2)
    assert m.step_cost(m.model_params(), short, {}).accept_len == pytest.approx(1.6)


def test_nccl_matters_only_with_custom_allreduce_disabled() -> None:
    params = m.model_params()
    custom = m.ServingConfig(tp=8)
    assert tok_s(params, custom, TUNED) == tok_s(params, custom, {})
    assert tok_s(params, BASE, TUNED) > tok_s(params, BASE, {}) * 1.05
    without_algo = {k: v for k, v in TUNED.items() if k != "NCCL_ALGO"}
    assert tok_s(params, BASE, {}) < tok_s(params, BASE, without_algo) < tok_s(params, BASE, TUNED)
    assert m.nccl_factor(params, {"NCCL_ALGO": "ring,tree"}) == pytest.approx(0.62)


def test_common_env_is_what_every_worker_shares() -> None:
    envs = [{"NCCL_ALGO": "Ring", "A": "1"}, {"A": "1"}, {"NCCL_ALGO": "Tree", "A": "1"}]
    assert m.common_env(envs) == {"A": "1"}
    assert m.common_env([]) == {}


def test_clock_factor_slows_compute() -> None:
    params = m.model_params()
    full = m.host_state()
    slow = m.host_state({"gpus": {"5": {"sm_clock": 990}}})
    assert m.clock_factor(full, 8) == 1.0
    assert m.clock_factor(slow, 8) == pytest.approx(0.5)
    assert m.clock_factor(slow, 4) == 1.0  # GPU 5 is not used at tp 4
    fast = m.step_cost(params, BASE, TUNED, m.clock_factor(full, 8))
    halved = m.step_cost(params, BASE, TUNED, m.clock_factor(slow, 8))
    # Compute doubles, all-reduce does not.
    assert halved.step_ms == pytest.approx(2 * fast.step_ms - fast.allreduce_ms)


def test_tp_and_cuda_graph() -> None:
    params = m.model_params()
    assert m.allreduce_ms(params, m.ServingConfig(tp=1, disable_custom_all_reduce=True), {}) == 0
    assert tok_s(params, m.ServingConfig(tp=4), {}) < tok_s(params, m.ServingConfig(tp=8), {})
    no_graph = m.ServingConfig(tp=8, disable_cuda_graph=True)
    assert tok_s(params, no_graph, {}) < tok_s(params, m.ServingConfig(tp=8), {})


def test_predicted_bench_throughput_is_a_bit_under_decode() -> None:
    params = m.model_params()
    decode = tok_s(params, SPEC2, TUNED)
    bench = m.predict_output_throughput(params, SPEC2, TUNED, 1024, 512)
    assert 0.98 * decode < bench < decode


def test_noise_is_seeded_and_sized() -> None:
    a = m.Noise(7, 0.02, 0.9)
    b = m.Noise(7, 0.02, 0.9)
    xs = [a.request_factor() for _ in range(4000)]
    assert xs[:50] == [b.request_factor() for _ in range(50)]
    assert statistics.fmean(xs) == pytest.approx(1.0, abs=0.01)
    assert statistics.pstdev(xs) == pytest.approx(0.02, rel=0.35)
    assert m.Noise(1, 0.0, 0.9).request_factor() == 1.0


def test_model_file_roundtrip(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / m.MODEL_FILE
    path.write_text('{"eagle": {"verify_ms": 29}}')
    params = m.load_params(path)
    assert params["eagle"]["verify_ms"] == 29
    assert params["decode_ms"] == m.DEFAULT_PARAMS["decode_ms"]
    assert '"verify_ms": 19.0' in m.dump_params(m.model_params())
