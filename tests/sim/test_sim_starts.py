"""The simulator's start-to-start level: one speed factor per server start, seeded per start."""

from __future__ import annotations

import statistics
from pathlib import Path

from orchestrator.sim import model as m
from orchestrator.sim import state as st

from .simhelpers import sim_server


def test_start_factor_is_seeded_per_start_and_has_its_sd() -> None:
    draws = [m.start_factor(7, n, 0.02) for n in range(1, 2001)]
    assert draws[:5] == [m.start_factor(7, n, 0.02) for n in range(1, 6)]  # reproducible
    assert len(set(draws)) == len(draws)  # every start its own
    sd = statistics.stdev(draws)
    assert 0.018 < sd < 0.022
    assert m.start_factor(7, 1, 0.0) == 1.0
    assert m.start_factor(8, 1, 0.02) != m.start_factor(7, 1, 0.02)


def test_start_counter_counts_per_host(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    assert [st.next_start(state) for _ in range(3)] == [1, 2, 3]
    assert st.next_start(tmp_path / "other.json") == 1


def test_each_server_start_draws_its_factor_and_says_it(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    env = {"ORCH_SIM_STATE": str(state), "ORCH_SIM_START_SD": "0.05"}
    seen = []
    for _ in range(2):
        with sim_server(tmp_path / "cwd", ["--seed", "3"], env) as srv:
            sim = srv.info()["sim"]
            seen.append((sim["start_index"], sim["start_factor"], sim["start_sd"]))
            assert f"server start {sim['start_index']} on this host" in srv.text()
    assert seen == [(n, m.start_factor(3, n, 0.05), 0.05) for n in (1, 2)]
    assert seen[0][1] != seen[1][1]


def test_start_sd_zero_leaves_speed_alone(tmp_path: Path) -> None:
    env = {"ORCH_SIM_STATE": str(tmp_path / "s.json"), "ORCH_SIM_START_SD": "0"}
    with sim_server(tmp_path / "cwd", [], env) as srv:
        assert srv.info()["sim"]["start_factor"] == 1.0
