"""`orch metrics ADAPTER` prints an adapter's catalogue; `orch validate`, `plan` and `apply`
refuse an `expect:` name the bench adapter cannot report (exit 2, located, nearest name), except
for the open-ended generic adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_orch

SERVING = """\
name: m
server:
  adapter: sglang
  args: {model-path: /m}
bench:
  adapter: sglang.bench_serving
expect:
  output_throughput: {min: 1}
  median_ttft: {max: 100}
"""


orch = run_orch


def test_metrics_prints_the_catalogue(tmp_path: Path) -> None:
    proc = orch(tmp_path, "metrics", "sglang.bench_serving")
    assert proc.returncode == 0, proc.stderr
    (row,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("total_throughput ")]
    assert row.split()[:3] == ["total_throughput", "tok/s", "higher"] and row.endswith("2026")
    data = json.loads(orch(tmp_path, "metrics", "vllm", "--json").stdout)
    rates = [m for m in data["server"]["metrics"] if m["name"] == "log_draft_acceptance_rate"]
    assert rates[0]["unit"] == "fraction" and rates[0]["better"] == "higher"
    generic = orch(tmp_path, "metrics", "generic").stdout
    assert "bench: open-ended" in generic
    wrong = orch(tmp_path, "metrics", "vlm")
    assert wrong.returncode == 2 and "did you mean 'vllm'?" in wrong.stderr


@pytest.mark.parametrize("command", ["validate", "plan", "apply"])
def test_an_unknown_expect_name_is_refused_with_the_nearest(tmp_path: Path, command: str) -> None:
    (tmp_path / "pb.yml").write_text(SERVING)
    proc = orch(tmp_path, command, "pb.yml")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pb.yml:9" in proc.stderr and "no metric 'median_ttft'" in proc.stderr, proc.stderr
    assert "did you mean 'median_ttft_ms'?" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_known_names_and_the_generic_adapter_validate(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(SERVING.replace("median_ttft:", "median_ttft_ms:"))
    assert orch(tmp_path, "validate", "pb.yml").returncode == 0
    generic = "name: g\nbench: {command: [echo]}\nexpect: {elapsed_msec: {max: 5}}\n"
    (tmp_path / "g.yml").write_text(generic)
    proc = orch(tmp_path, "validate", "g.yml")
    assert proc.returncode == 0, proc.stderr
