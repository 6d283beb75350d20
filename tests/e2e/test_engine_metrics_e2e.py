"""The engine's /metrics per repeat, end to end: `orch apply` of two simulated SGLang cells
(EAGLE-3 on and off, `--enable-metrics`), each measured repeat's samples in the bundle, the
summaries in metrics.json, and `orch show`, `orch diff` and `orch report` saying them, the
acceptance the off cell lacks said, never a zero."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from sim_helpers import eagle3_playbook, free_port, load, only_run, orch

SPEC = {
    "speculative-algorithm": "EAGLE3",
    "speculative-draft-model-path": "/models/Kimi-K2.5-EAGLE3",
    "speculative-num-steps": 2,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 3,
}


def test_a_cells_bundle_holds_its_engine_series_and_summaries_and_every_view_says_them(
    tmp_path: Path,
) -> None:
    data = eagle3_playbook(tmp_path, free_port(), name="engine-metrics", dest="unused")
    del data["repo"]  # the simulator's built-in performance model
    data["matrix"] = {"spec": ["eagle3", "off"]}
    args = {k: v for k, v in data["server"]["args"].items() if k not in SPEC}
    args["enable-metrics"] = True  # SGLang serves /metrics only then: orch scrapes it by default
    data["server"]["args"] = [args, "{{ spec_args[matrix.spec] }}"]
    data["vars"]["spec_args"] = {"eagle3": SPEC, "off": {}}
    data["bench"]["args"].update({"num-prompts": 4, "max-concurrency": 2})
    data["engine_metrics"] = {"interval": 0.2}
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(yaml.safe_dump(data, sort_keys=False))
    home, results = tmp_path / "home", tmp_path / "results"

    done = orch("apply", str(playbook), "--results", str(results),
                cwd=tmp_path, home=home)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = only_run(results)
    cells = {d.name.split("-")[0]: d for d in (run / "cells").iterdir() if d.is_dir()}
    for spec, cell in cells.items():
        for n in (1, 2):
            exit_doc = load(cell / "bench" / str(n) / "exit.json")
            assert exit_doc["engine_metrics"]["samples"] >= 2, exit_doc
            series = (cell / "bench" / str(n) / "engine_metrics.jsonl").read_text().splitlines()
            assert all("sglang:num_running_reqs" in json.loads(s)["text"] for s in series)
        assert not (cell / "bench" / "warmup-1" / "engine_metrics.jsonl").exists()
        metrics = load(cell / "metrics.json")
        assert metrics["engine_metrics"]["engine"] == "sglang"
        assert metrics["units"]["engine_kv_cache_usage_max"] == "fraction"
        for repeat in metrics["repeats"]:
            assert repeat["engine_requests_running_max"] >= 1
            assert 0 < repeat["engine_kv_cache_usage_max"] < 1
            assert repeat["engine_preemptions"] == 0
            assert (spec == "eagle3") == ("engine_spec_accept_length" in repeat)
    absent = load(cells["off"] / "metrics.json")["engine_metrics"]["absent"]
    assert absent["engine_spec_accept_length"] == "0 throughout (speculative decoding off)"

    shown = orch("show", str(cells["off"]), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "engine /metrics (sglang), per repeat" in shown.stdout
    assert "engine_kv_cache_usage_max" in shown.stdout
    assert "lacks spec_acceptance_rate, spec_accept_length: 0 throughout" in shown.stdout

    diff = orch("diff", str(cells["eagle3"]), str(cells["off"]), cwd=tmp_path)
    assert diff.returncode in (0, 1), diff.stderr
    assert "engine_kv_cache_usage_mean" in diff.stdout
    assert "B: engine /metrics (sglang) lacks spec_acceptance_rate" in diff.stdout

    report = orch("report", str(run), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "engine /metrics, median over the measured repeats" in report.stdout
    assert "spec_accept_length" in report.stdout and "tokens/step" in report.stdout
