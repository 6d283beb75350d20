"""The simulator's /metrics follows its state, under both engines' family names: scraped by the
runner's scraper during a real bench, parsed and summarised as the controller does."""

from __future__ import annotations

from pathlib import Path

from orchestrator.adapters.engine_families import families_of
from orchestrator.analyze.engine_metrics import read_samples, summarize_repeat
from orchestrator.runner.engine_metrics import Scraper

from .simhelpers import SPEC_FLAGS, run_bench, sim_server

BENCH = ("--num-prompts", "8", "--max-concurrency", "4", "--random-input-len", "64")


def scraped(url: str, folder: Path, engine: str, *bench: str) -> Path:
    """One bench run against `url` while a scraper keeps `engine`'s families; its samples."""
    folder.mkdir(parents=True)
    scraper = Scraper({"url": url + "/metrics", "interval": 0.05, "families": families_of(engine)})
    scraper.start(str(folder))
    done = run_bench(folder, url, *BENCH, *bench)
    info = scraper.stop()
    assert done.returncode == 0, done.stderr
    assert info["samples"] >= 3 and not info.get("errors")
    return folder / info["file"]


def test_load_kv_use_prefix_hits_and_eagle_acceptance_show_on_both_engines_names(
    tmp_path: Path,
) -> None:
    with sim_server(tmp_path / "srv", [*SPEC_FLAGS, "--enable-metrics"]) as srv:
        first = scraped(srv.url, tmp_path / "a", "vllm", "--seed", "5", "--random-output-len", "64")
        # the same prompts again: served from the prefix cache the first run filled
        again = scraped(
            srv.url, tmp_path / "b", "sglang", "--seed", "5", "--random-output-len", "64"
        )
    for path, engine in ((first, "vllm"), (again, "sglang")):
        metrics, absent = summarize_repeat(read_samples(path), engine)
        assert not absent  # the simulator serves every family of both engines
        assert metrics["engine_requests_running_max"] >= 2  # 4 concurrent requests ran
        assert 0 < metrics["engine_kv_cache_usage_max"] < 1
        assert 0 < metrics["engine_spec_acceptance_rate"] < 1  # EAGLE-3: some drafts rejected
        assert 1 < metrics["engine_spec_accept_length"] <= 3  # 2 steps + the bonus token
        assert metrics["engine_preemptions"] == 0  # the simulator never preempts
    assert summarize_repeat(read_samples(first), "vllm")[0]["engine_prefix_cache_hit_rate"] < 0.2
    assert summarize_repeat(read_samples(again), "sglang")[0]["engine_prefix_cache_hit_rate"] > 0.5


def test_without_speculation_vllm_names_no_spec_family_and_it_is_said(tmp_path: Path) -> None:
    with sim_server(tmp_path / "srv") as srv:
        path = scraped(srv.url, tmp_path / "a", "vllm", "--random-output-len", "16")
    metrics, absent = summarize_repeat(read_samples(path), "vllm")
    assert "engine_spec_acceptance_rate" not in metrics
    assert absent["engine_spec_acceptance_rate"].endswith("(speculative decoding off)")
    assert metrics["engine_requests_running_max"] >= 1
