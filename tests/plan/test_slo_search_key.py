"""`bench.search`: refused with the file, line and key path when it is wrong; planned as one
cell per level sharing one server start, each level with the SLO stop rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli import main
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.errors import InputError
from orchestrator.plan.build import build_cells
from orchestrator.plan.sessions import session_labels

PLAYBOOK = """\
name: slo
hosts: all
matrix:
  rate: [1, 2, 4]
server:
  adapter: sglang
  launcher: [python3, -m, orchestrator.sim, serve]
  args: {{model-path: /m, port: 30000}}
bench:
  adapter: sglang.bench_serving
  launcher: [python3, -m, orchestrator.sim, bench]
  args: {{num-prompts: 8, request-rate: "{{{{ matrix.rate }}}}"}}
  repeats: {repeats}
  search:
{search}
"""
GOOD = "    axis: rate\n    slo: {p99_ttft_ms: 500, request_throughput: {min: 0.5}}"


def write(tmp_path: Path, search: str = GOOD, repeats: str = "6") -> Path:
    path = tmp_path / "pb.yml"
    path.write_text(PLAYBOOK.format(search=search, repeats=repeats))
    return path


def test_levels_share_one_server_start_and_stop_once_decided(tmp_path: Path) -> None:
    cells = build_cells(load_playbook(write(tmp_path)), load_inventory(None))
    assert [c.axes["rate"] for c in cells] == [1, 2, 4]
    assert len(set(session_labels(cells).values())) == 1  # one server start for the search
    for cell in cells:
        search, rule = cell.bench.search, cell.bench.settle
        assert search is not None and rule is not None
        slo = {"p99_ttft_ms": {"max": 500.0}, "request_throughput": {"min": 0.5}}
        assert search.slo == slo and search.confidence == 0.95
        assert rule.slo == slo and rule.min == 5  # both read between repeats
    result = CliRunner().invoke(main, ["plan", str(write(tmp_path))])
    assert result.exit_code == 0, result.output
    assert (
        "SLO search on localhost: the highest rate of 1, 2, 4 meeting p99_ttft_ms ≤ 500, "
        "request_throughput ≥ 0.5; 1 server start(s); each level 5..6 repeats" in result.output
    )


@pytest.mark.parametrize(
    ("search", "repeats", "needle", "key_path", "line"),
    [
        ("    axis: rate\n    slo: {p99_ttft_ms: 500}\n    confidance: 0.9", "6",
         "did you mean 'confidence'", "bench.search.confidance", 17),
        ("    axis: rate", "6", "search needs slo", "bench.search", 15),
        ("    axis: rate\n    slo: {p99_ttft_ms: {below: 5}}", "6",
         "{max: X} or {min: X}", "bench.search.slo.p99_ttft_ms", 16),
        ("    axis: rate\n    slo: {p99_ttft_ms: fast}", "6",
         "expected a number >= 0", "bench.search.slo.p99_ttft_ms", 16),
        ("    axis: rate\n    slo: {p99_ttft_ms: 5}\n    confidence: 40%", "6",
         "not in (0.5, 1)", "bench.search.confidence", 17),
        ("    axis: concurrency\n    slo: {p99_ttft_ms: 5}", "6",
         "'concurrency' is not a matrix axis (axes: rate)", "bench.search.axis", 15),
        ("    axis: rate\n    slo: {ttft_p99_ms: 5}", "6",
         "did you mean 'p99_ttft_ms'", "bench.search.slo.ttft_p99_ms", None),
        ("    axis: rate\n    slo: {error_rate: 0.01}", "6",
         "writes no count of failed requests", "bench.search.slo.error_rate", None),
        ("    axis: rate\n    slo: {p99_ttft_ms: 5}", "3",
         "needs at least 5 repeats", "bench.repeats", None),
        ("    axis: rate\n    slo: {p99_ttft_ms: 5}", "{max: 8, until: 2%}",
         "repeats is the most repeats a level runs", "bench.repeats", None),
    ],
)  # fmt: skip
def test_a_wrong_search_is_refused_where_it_is_written(
    tmp_path: Path, search: str, repeats: str, needle: str, key_path: str, line: int | None
) -> None:
    path = write(tmp_path, search, repeats)
    with pytest.raises(InputError) as info:
        build_cells(load_playbook(path), load_inventory(None))
    assert needle in info.value.render()
    assert info.value.key_path == key_path
    assert info.value.exit_code == 2
    if line is not None:
        assert info.value.location is not None and info.value.location.line == line
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 2 and needle in result.output  # nothing run, one message


def test_an_axis_of_text_is_no_search(tmp_path: Path) -> None:
    path = write(tmp_path)
    path.write_text(path.read_text().replace("[1, 2, 4]", "[low, high]"))
    with pytest.raises(InputError) as info:
        build_cells(load_playbook(path), load_inventory(None))
    assert "has a value that is not a number: 'low'" in info.value.message
