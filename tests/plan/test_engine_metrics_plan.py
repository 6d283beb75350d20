"""`engine_metrics:` as planned: on by default where the adapter's engine serves /metrics (vLLM
always, SGLang with --enable-metrics), off with `false`, a generic server only with `engine:`,
refused where it is written otherwise; observation only, so no cell id changes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.cell import Cell
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.errors import InputError
from orchestrator.plan.build import build_cells

VLLM = """\
name: p
server: {adapter: vllm, args: {model: /m, port: 30001}}
bench: {adapter: vllm.bench_serve, args: {dataset-name: random, num-prompts: 24}, repeats: 3}
"""
SGLANG = """\
name: p
server: {adapter: sglang, args: {model-path: /m, port: 30001}}
bench: {adapter: sglang.bench_serving, args: {num-prompts: 4}}
"""
GENERIC = """\
name: p
server: {command: serve --port 30001, port: 30001}
bench: {command: bench, result_file: r.json}
"""


def plan(tmp_path: Path, text: str) -> Cell:
    path = tmp_path / "playbook.yml"
    path.write_text(textwrap.dedent(text))
    (cell,) = build_cells(load_playbook(path, {}), load_inventory(None))
    return cell


def test_vllm_scrapes_its_families_by_default_and_the_id_does_not_change(tmp_path: Path) -> None:
    cell = plan(tmp_path, VLLM)
    spec = cell.engine_metrics
    assert spec is not None and spec.engine == "vllm" and spec.interval == 1.0
    assert spec.url == "http://127.0.0.1:30001/metrics"
    assert "vllm:kv_cache_usage_perc" in spec.families
    off = plan(tmp_path, VLLM + "engine_metrics: false\n")
    assert off.engine_metrics is None and off.id == cell.id
    slower = plan(tmp_path, VLLM + "engine_metrics: {interval: 5, path: /m2}\n")
    assert slower.engine_metrics is not None and slower.engine_metrics.interval == 5.0
    assert slower.engine_metrics.url.endswith(":30001/m2") and slower.id == cell.id


def test_sglang_scrapes_only_with_enable_metrics_or_when_asked(tmp_path: Path) -> None:
    assert plan(tmp_path, SGLANG).engine_metrics is None
    flagged = plan(tmp_path, SGLANG.replace("port: 30001}", "port: 30001, enable-metrics: true}"))
    assert flagged.engine_metrics is not None and flagged.engine_metrics.engine == "sglang"
    asked = plan(tmp_path, SGLANG + "engine_metrics: true\n")
    assert asked.engine_metrics is not None
    assert "sglang:token_usage" in asked.engine_metrics.families


def test_a_generic_server_needs_its_engine_named_at_the_key(tmp_path: Path) -> None:
    assert plan(tmp_path, GENERIC).engine_metrics is None
    with pytest.raises(InputError) as err:
        plan(tmp_path, GENERIC + "engine_metrics: {interval: 2}\n")
    assert err.value.key_path == "engine_metrics.engine"
    assert err.value.location is not None and err.value.location.line == 4
    named = plan(tmp_path, GENERIC + "engine_metrics: {engine: sglang}\n")
    assert named.engine_metrics is not None and named.engine_metrics.engine == "sglang"


def test_an_unknown_engine_or_no_server_is_refused_where_it_is_written(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        plan(tmp_path, GENERIC + "engine_metrics: {engine: tgi}\n")
    assert err.value.key_path == "engine_metrics.engine" and "vllm, sglang" in err.value.message
    bench_only = "name: p\nbench: {command: bench, result_file: r.json}\nengine_metrics: true\n"
    with pytest.raises(InputError) as err:
        plan(tmp_path, bench_only)
    assert err.value.key_path == "engine_metrics" and "needs a server" in err.value.message
