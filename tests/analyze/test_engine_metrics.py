"""The engine's /metrics per repeat, pure: the runner's line filter, prometheus_client's parse,
the summaries (gauges' mean and max, counters' deltas, ratios) and what is said absent."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from analyze_fixtures import base_cell, write_cell

from orchestrator.analyze.engine_metrics import (
    Sample,
    ScrapeSpan,
    add_engine_metrics,
    coarse_sampling_note,
    parse_exposition,
    read_samples,
    summarize_repeat,
)
from orchestrator.analyze.verdict import score_cell
from orchestrator.cell import Cell
from orchestrator.results.show import absent_lines
from orchestrator.runner.engine_metrics import Scraper, kept_text

SGLANG_RESULT = (
    Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "bench_serving.2026.jsonl"
)

VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}
# HELP vllm:prefix_cache_queries_total Prefix cache queries.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}
vllm:prefix_cache_queries_created{{engine="0",model_name="m"}} 1.7e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempted}
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{le="0.001",model_name="m"}} 0.0
vllm:time_to_first_token_seconds_count{{model_name="m"}} 3.0
"""
SPEC = """\
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
"""
FAMILIES = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:num_preemptions",
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
]


def vllm_sample(t: float, spec: dict[str, float] | None = None, **values: float) -> Sample:
    text = VLLM_TEXT.format(**values) + (SPEC.format(**spec) if spec else "")
    return Sample(t, parse_exposition(kept_text(text, FAMILIES)))


def test_the_runner_keeps_only_the_named_families_and_the_text_still_parses() -> None:
    text = VLLM_TEXT.format(running=1, waiting=0, kv=0.5, queries=10, hits=2, preempted=0)
    kept = kept_text(text, FAMILIES)
    assert "time_to_first_token" not in kept and "_created" not in kept
    parsed = parse_exposition(kept)
    assert parsed["vllm:prefix_cache_hits_total"] == [2.0]
    assert parsed["vllm:kv_cache_usage_perc"] == [0.5]
    assert kept_text(text, None) == text  # no families named: the whole exposition


def test_vllm_gauges_are_mean_and_max_and_counters_are_deltas_over_the_repeat() -> None:
    base = dict(preempted=3)
    samples = [
        vllm_sample(0, running=0, waiting=4, kv=0.1, queries=100, hits=10, **base),
        vllm_sample(1, running=4, waiting=2, kv=0.5, queries=300, hits=110, **base),
        vllm_sample(2, running=2, waiting=0, kv=0.3, queries=500, hits=210, preempted=5),
    ]
    metrics, absent = summarize_repeat(samples, "vllm")
    assert metrics["engine_kv_cache_usage_mean"] == pytest.approx(0.3)
    assert metrics["engine_kv_cache_usage_max"] == 0.5
    assert metrics["engine_requests_running_mean"] == pytest.approx(2.0)
    assert metrics["engine_requests_waiting_max"] == 4
    assert metrics["engine_prefix_cache_hit_rate"] == pytest.approx(200 / 400)
    assert metrics["engine_preemptions"] == 2
    # vLLM registers its spec_decode counters only with speculative decoding: said, not 0
    assert "engine_spec_acceptance_rate" not in metrics
    assert "speculative decoding off" in absent["engine_spec_acceptance_rate"]
    assert "vllm:spec_decode_num_accepted_tokens" in absent["engine_spec_accept_length"]


def test_vllm_acceptance_is_accepted_over_draft_tokens_and_length_counts_the_bonus() -> None:
    common = dict(running=1, waiting=0, kv=0.1, queries=0, hits=0, preempted=0)
    samples = [
        vllm_sample(0, {"drafts": 10, "draft_tokens": 30, "accepted": 15}, **common),
        vllm_sample(1, {"drafts": 110, "draft_tokens": 330, "accepted": 165}, **common),
    ]
    metrics, absent = summarize_repeat(samples, "vllm")
    assert metrics["engine_spec_acceptance_rate"] == pytest.approx(150 / 300)
    assert metrics["engine_spec_accept_length"] == pytest.approx(1 + 150 / 100)
    # no prefix lookups in the repeat: no rate, and why
    assert absent == {"engine_prefix_cache_hit_rate": "no prefix-cache lookups"}


def test_a_counter_that_went_down_was_reset_and_counts_from_zero() -> None:
    common = dict(running=1, waiting=0, kv=0.1, queries=100, hits=0)
    samples = [vllm_sample(0, preempted=7, **common), vllm_sample(1, preempted=2, **common)]
    assert summarize_repeat(samples, "vllm")[0]["engine_preemptions"] == 2


SGLANG_TEXT = """\
# TYPE sglang:token_usage gauge
sglang:token_usage{{model_name="m"}} {usage}
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="m"}} {running}
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{model_name="m"}} 0.0
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{model_name="m"}} {accept}
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{model_name="m"}} {prompt}
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{{cache_source="device",model_name="m"}} {device}
sglang:cached_tokens_total{{cache_source="host",model_name="m"}} {host}
"""


def test_sglang_sums_label_sets_and_a_zero_acceptance_gauge_is_absent_not_zero() -> None:
    def sample(t: float, **values: float) -> Sample:
        return Sample(t, parse_exposition(SGLANG_TEXT.format(**values)))

    samples = [
        sample(0, usage=0.2, running=1, accept=0, prompt=1000, device=100, host=0),
        sample(1, usage=0.4, running=3, accept=0, prompt=2000, device=500, host=100),
    ]
    metrics, absent = summarize_repeat(samples, "sglang")
    assert metrics["engine_kv_cache_usage_mean"] == pytest.approx(0.3)
    assert metrics["engine_prefix_cache_hit_rate"] == pytest.approx(500 / 1000)
    assert absent["engine_spec_accept_length"] == "0 throughout (speculative decoding off)"
    assert "sglang:num_retracted_requests not on /metrics" in absent["engine_preemptions"]
    assert "engine_spec_accept_length" not in metrics


def test_an_engine_that_never_answered_is_said_with_the_flag_it_needs() -> None:
    samples = [Sample(0, error="HTTP 404"), Sample(1, error="HTTP 404")]
    metrics, absent = summarize_repeat(samples, "sglang")
    assert metrics == {}
    assert set(absent.values()) == {
        "/metrics: HTTP 404 (SGLang serves /metrics with --enable-metrics)"
    }
    lines = absent_lines({"engine": "sglang", "absent": absent})
    assert len(lines) == 1 and lines[0].startswith("engine /metrics (sglang) lacks kv_cache_usage")


def test_samples_are_read_back_and_a_bad_text_is_an_error_sample(tmp_path: Path) -> None:
    text = VLLM_TEXT.format(running=1, waiting=0, kv=0.5, queries=10, hits=2, preempted=0)
    path = tmp_path / "engine_metrics.jsonl"
    lines = [{"t": 1.0, "text": text}, {"t": 2.0, "error": "HTTP 500"}, {"t": 3.0, "text": "x y z"}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + "not json\n")
    samples = read_samples(path)
    assert [s.t for s in samples] == [1.0, 2.0, 3.0]
    assert samples[0].values["vllm:num_requests_running"] == [1.0]
    assert samples[1].error == "HTTP 500"
    assert samples[2].error is not None and samples[2].error.startswith("unparsable")


def test_the_scraper_thins_to_its_bound_keeping_the_first_sample_and_doubling_its_step() -> None:
    scraper = Scraper({"url": "http://127.0.0.1:1/metrics", "interval": 0.5, "max_samples": 8})
    for i in range(20):
        scraper._keep({"t": float(i), "text": ""})
    times = [s["t"] for s in scraper.samples]
    assert len(times) <= 8 and times[0] == 0.0 and times[-1] == 19.0
    assert scraper.interval_s == 0.5 * 2**scraper.thinned and scraper.thinned >= 2
    assert all(b > a for a, b in itertools.pairwise(times))


def test_a_load_shorter_than_three_scrapes_is_said_with_a_step_that_would_sample_it() -> None:
    enough = [ScrapeSpan(1, 30.0, 1.0, 1.0), ScrapeSpan(2, 3.0, 1.0, 1.01)]  # 3 scrapes: enough
    assert coarse_sampling_note(enough) is None
    spans = [ScrapeSpan(1, 0.9, 1.0, 1.0), ScrapeSpan(2, 12.0, 1.0, 1.0)]
    note = coarse_sampling_note([*spans, ScrapeSpan(3, 0.77, 1.0, 1.01)])
    assert note == (
        "engine gauges sampled every 1 s over a load of 0.77-0.9 s (repeats 1, 3): the "
        "running/waiting and KV-use maxima may miss it; set engine_metrics: {interval: 0.2}"
    )
    # already at the finest step: no step to suggest, only a longer load
    note = coarse_sampling_note([ScrapeSpan(4, 0.1, 0.05, 0.05)])
    assert note is not None and note.endswith("a longer load (more requests) is sampled more often")


def test_a_load_that_fits_between_two_late_scrapes_is_said_and_no_finer_step_offered() -> None:
    # as vLLM's CPU server under a flood: scrapes every 0.2 s, one answered 0.6 s late, and the
    # whole 0.77 s load between it and the next: both gauges read 0
    stalled = ScrapeSpan(3, 0.77, 0.2, 0.81)
    assert stalled.too_coarse and stalled.stalled
    assert coarse_sampling_note([ScrapeSpan(1, 1.26, 0.2, 0.4), stalled]) == (
        "engine gauges sampled every 0.2 s (up to 0.81 s apart: the server answered /metrics "
        "late under the load) over a load of 0.77 s (repeats 3): the running/waiting and KV-use "
        "maxima may miss it; a longer load (more requests) is sampled more often"
    )


def test_a_cells_short_repeats_get_the_note_and_a_long_one_does_not(tmp_path: Path) -> None:
    text = VLLM_TEXT.format(running=0, waiting=0, kv=0, queries=0, hits=0, preempted=0)
    for n in (1, 2):
        folder = tmp_path / "bench" / str(n)
        folder.mkdir(parents=True)
        lines = [{"t": float(t), "text": text} for t in range(3)]
        (folder / "engine_metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        scraped = {"file": "engine_metrics.jsonl", "samples": 3, "interval_s": 1.0}
        (folder / "exit.json").write_text(json.dumps({"rc": 0, "engine_metrics": scraped}))
    repeats: list[dict[str, object]] = [{"n": 1, "duration": 0.8}, {"n": 2, "duration": 20.0}]
    block = add_engine_metrics(tmp_path, "vllm", repeats, {})
    assert block["note"].startswith(
        "engine gauges sampled every 1 s over a load of 0.8 s (repeats 1)"
    )
    assert repeats[0]["engine_requests_running_max"] == 0.0  # still recorded: the note qualifies it
    kept_whole = add_engine_metrics(tmp_path, None, repeats, {})  # no engine: no maxima to doubt
    assert kept_whole["repeats"]["1"]["samples"] == 3 and "note" not in kept_whole
    repeats[0]["duration"] = 5.0
    assert "note" not in add_engine_metrics(tmp_path, "vllm", repeats, {})


def test_the_cells_verdict_notes_a_repeat_sampled_too_coarsely_for_its_load(tmp_path: Path) -> None:
    spec = base_cell()
    spec["bench"].update(repeats=1, result_file="result.jsonl")
    spec["engine_metrics"] = {"url": "http://127.0.0.1:1/metrics", "engine": "vllm"}
    cell_dir = write_cell(tmp_path / "cell", cell=spec)
    folder = cell_dir / "bench" / "1"
    folder.mkdir(parents=True)
    (folder / "result.jsonl").write_text(SGLANG_RESULT.read_text())  # a load of 175 s
    text = VLLM_TEXT.format(running=2, waiting=0, kv=0.1, queries=0, hits=0, preempted=0)
    (folder / "engine_metrics.jsonl").write_text(json.dumps({"t": 1.0, "text": text}) + "\n")
    scraped = {"file": "engine_metrics.jsonl", "samples": 1, "interval_s": 100.0}
    (folder / "exit.json").write_text(json.dumps({"rc": 0, "engine_metrics": scraped}))
    metrics = score_cell(cell_dir, Cell.model_validate(spec)).metrics
    assert metrics["repeats"][0]["engine_requests_running_max"] == 2.0
    (note,) = [n for n in metrics["notes"] if n.startswith("engine gauges")]
    assert note.startswith("engine gauges sampled every 100 s over a load of 175 s")
