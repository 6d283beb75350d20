"""`orch report`: units in the human table and `orch show`, and the Δ% against a baseline
(`--baseline 'commit=good'`) with its errors (issue 16 item 7)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from analyze_fixtures import base_cell, write_run

from orchestrator.analyze.evidence import load_run
from orchestrator.analyze.metrics import cell_metric_unit
from orchestrator.analyze.report.tables import build_report, render_report
from orchestrator.errors import InputError
from orchestrator.results.read import open_run
from orchestrator.results.records import CellRecord
from orchestrator.results.show import describe_cell, describe_run


def _run(tmp_path: Path) -> Path:
    """commit good/bad × spec off/eagle: eagle at bad is 25% slower; plus a regex metric."""
    cells = []
    for commit in ("good", "bad"):
        for spec, tput in (("off", 80.0), ("eagle", 100.0)):
            value = tput * (0.75 if (commit, spec) == ("bad", "eagle") else 1.0)
            repeats = [
                {"output_throughput": value + d, "median_ttft_ms": 40.0, "my_gauge": 7.0}
                for d in (-1.0, 0.0, 1.0)
            ]
            cell = base_cell(f"{commit}-{spec}-0000", axes={"commit": commit, "spec": spec})
            cells.append({"cell": cell, "repeats": repeats})
    return write_run(tmp_path, "20261201-120000-base-0001", cells)


def _lines(text: str) -> dict[str, str]:
    """Table rows by `commit spec`; split, a row is axes, host, status, `median ± spread`, Δ%."""
    return {line.split()[0] + " " + line.split()[1]: line for line in text.splitlines()[3:] if line}


def test_units_are_in_the_table_headers(tmp_path: Path) -> None:
    rep = build_report(load_run(_run(tmp_path)).cells)
    assert rep.units["output_throughput"] == "tok/s" and rep.units["my_gauge"] is None
    head, units = render_report(rep, "table").splitlines()[:2]
    assert head.split()[4:] == ["output_throughput", "median_ttft_ms", "my_gauge"]
    assert units.split() == ["tok/s", "ms"]  # under their columns; the regex metric has none
    assert units.index("tok/s") == head.index("output_throughput")
    md_head = render_report(rep, "md").splitlines()[0]
    cols = [c.strip() for c in md_head.strip("|").split("|")]
    assert cols[4:] == ["output_throughput (tok/s)", "median_ttft_ms (ms)", "my_gauge"]


def test_baseline_gives_a_delta_against_the_same_configuration(tmp_path: Path) -> None:
    rep = build_report(load_run(_run(tmp_path)).cells, baseline="commit=good")
    text = render_report(rep, "table")
    head = text.splitlines()[0].split()
    assert head[4:7] == ["output_throughput", "Δ%", "median_ttft_ms"]
    rows = _lines(text)
    assert rows["bad eagle"].split()[7] == "-25.0%"  # 75 vs 100: against good/eagle, not off
    assert rows["bad off"].split()[7] == "+0.0%"
    assert rows["good eagle"].split()[7] == "base"
    assert "Δ%: median against the baseline commit=good" in text
    cells = load_run(_run(tmp_path / "p")).cells
    pivot = render_report(build_report(cells, by="commit", baseline="commit=good"), "md")
    assert "75.00 ± 1.00 (-25.0%)" in pivot and "100.00 ± 1.00 (base)" in pivot


def test_tidy_rows_name_the_baseline_cell(tmp_path: Path) -> None:
    rep = build_report(load_run(_run(tmp_path)).cells, baseline="commit=good")
    rows = json.loads(render_report(rep, "json"))
    assert {(r["cell_id"], r["baseline_cell"]) for r in rows} == {
        ("good-off-0000", "good-off-0000"), ("good-eagle-0000", "good-eagle-0000"),
        ("bad-off-0000", "good-off-0000"), ("bad-eagle-0000", "good-eagle-0000"),
    }  # fmt: skip
    assert next(csv.DictReader(io.StringIO(render_report(rep, "csv"))))["baseline_cell"]
    plain = build_report(load_run(_run(tmp_path / "plain")).cells)
    assert "baseline_cell" not in json.loads(render_report(plain, "json"))[0]


def test_a_baseline_by_cell_id_compares_every_cell_with_that_one(tmp_path: Path) -> None:
    rep = build_report(load_run(_run(tmp_path)).cells, baseline="good-off")
    rows = _lines(render_report(rep, "table"))
    assert rows["good eagle"].split()[7] == "+25.0%" and rows["good off"].split()[7] == "base"


def test_a_baseline_matching_nothing_or_several_configurations_is_refused(
    tmp_path: Path,
) -> None:
    cells = load_run(_run(tmp_path)).cells
    with pytest.raises(InputError) as err:
        build_report(cells, baseline="commit=best")
    assert err.value.key_path == "--baseline"
    assert "baseline 'commit=best' matches no cell" in err.value.message
    assert "commit=good|bad; spec=off|eagle" in str(err.value.hint)
    with pytest.raises(InputError) as err:
        build_report(cells, baseline="spec=*")  # good/off and good/eagle for every cell
    assert "matches 2 configurations for cell" in err.value.message
    assert "commit=good,spec=off; commit=good,spec=eagle" in err.value.message
    with pytest.raises(InputError, match="matches 4 configurations"):
        build_report(cells, baseline="*-0000")  # a cell id glob naming several cells
    with pytest.raises(InputError, match="unknown axis 'comit'"):
        build_report(cells, baseline="comit=good")


def test_the_cli_exits_2_on_a_bad_baseline(tmp_path: Path) -> None:
    run = _run(tmp_path)
    argv = [sys.executable, "-m", "orchestrator", "report", str(run), "--baseline", "commit=x"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and not res.stdout and "Traceback" not in res.stderr
    assert "matches no cell" in res.stderr and "commit=good|bad" in res.stderr


def test_show_prints_units(tmp_path: Path) -> None:
    run = _run(tmp_path)
    cell = CellRecord(run / "cells" / "bad-eagle-0000")
    shown = describe_cell(cell, unit_of=cell_metric_unit).splitlines()
    header = next(line for line in shown if line.startswith("metric "))
    assert header.split() == ["metric", "unit", "median", "min", "max", "n"]
    row = next(line for line in shown if line.startswith("output_throughput "))
    assert row.split()[1] == "tok/s"
    assert next(line for line in shown if line.startswith("my_gauge ")).split()[1] == "7"
    listing = describe_run(open_run(str(run), tmp_path), unit_of=cell_metric_unit)
    assert "output_throughput 75 tok/s" in listing
