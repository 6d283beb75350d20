"""`orch report`: flat and pivoted tables, tidy CSV/JSON, expectations and failed cells."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from analyze_fixtures import base_cell, write_run

from orchestrator.analyze.evidence import load_cells, load_run
from orchestrator.analyze.plot.charts import plot_report
from orchestrator.analyze.report.tables import build_report, render_report
from orchestrator.errors import BundleError, InputError


def _run(tmp_path: Path) -> Path:
    """2 nccl × 2 spec cells with 3 repeats × 2 metrics, plus one failed cell."""
    cells = []
    for nccl in ("default", "tuned"):
        for spec, base in (("off", 89.0), ("eagle3-2", 94.0)):
            bump = 2.0 if nccl == "tuned" else 0.0
            repeats = [
                {"output_throughput": base + bump + d, "median_ttft_ms": 40.0 + d}
                for d in (-0.5, 0.0, 0.5)
            ]
            expectations = [
                {"metric": "output_throughput", "ok": base + bump >= 90, "bound": ">= 90"}
            ]
            expectations[0]["value"] = base + bump
            cells.append(
                {
                    "cell": base_cell(
                        f"{nccl}-{spec}-0000", axes={"nccl": nccl, "spec": spec}, host="gpu01"
                    ),
                    "repeats": repeats,
                    "expectations": expectations,
                }
            )
    cells.append(
        {
            "cell": base_cell("broken-0000", axes={"nccl": "tuned", "spec": "bad"}),
            "status": "failed",
            "reason": "server exited during startup (rc 1): CUDA out of memory\nmore log",
        }
    )
    return write_run(tmp_path, "20261130-142501-demo-3f9c", cells)


def test_flat_table_with_expectations_and_failed_reason(tmp_path: Path) -> None:
    report = build_report(load_run(_run(tmp_path)).cells)
    assert report.axes == ["nccl", "spec"]
    assert report.metrics == ["output_throughput", "median_ttft_ms"]
    text = render_report(report, "table")
    lines = text.splitlines()
    header = lines[0].split()
    assert header[:4] == ["nccl", "spec", "host", "status"]
    assert "reason" in header
    row = next(line for line in lines if line.startswith("default") and " off " in line)
    assert "89.00 ± 0.50 ✗" in row and "40.00 ± 0.50" in row
    assert "96.00 ± 0.50 ✓" in text
    broken = next(line for line in lines if " bad " in line)
    assert "failed" in broken and "CUDA out of memory" in broken
    # the whole reason, every line, below the table
    assert "broken-0000 (gpu01) failed: server exited" in text and "more log" in text
    # the value as the table shows numbers, not Python's repr of a float
    assert "✗ default-off-0000 output_throughput = 89.00: expected >= 90" in text


def test_pivot_by_axis(tmp_path: Path) -> None:
    report = build_report(load_run(_run(tmp_path)).cells, by="spec")
    md = render_report(report, "md")
    header = md.splitlines()[0]
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols == [  # markdown headers are one line: the unit in brackets (issue 16 item 7)
        "nccl",
        "host",
        "output_throughput (tok/s) [spec=off]",
        "output_throughput (tok/s) [spec=eagle3-2]",
        "output_throughput (tok/s) [spec=bad]",
        "median_ttft_ms (ms) [spec=off]",
        "median_ttft_ms (ms) [spec=eagle3-2]",
        "median_ttft_ms (ms) [spec=bad]",
    ]
    rows = [line for line in md.splitlines()[2:] if line.startswith("|")]
    assert len(rows) == 2  # default, tuned
    tuned = [c.strip() for c in rows[1].strip("|").split("|")]
    assert tuned[:5] == ["tuned", "gpu01", "91.00 ± 0.50 ✓", "96.00 ± 0.50 ✓", "failed"]
    default = [c.strip() for c in rows[0].strip("|").split("|")]
    assert default[4] == ""  # no such cell


def test_tidy_csv_and_json_have_one_row_per_cell_repeat_metric(tmp_path: Path) -> None:
    report = build_report(load_run(_run(tmp_path)).cells)
    rows = list(csv.DictReader(io.StringIO(render_report(report, "csv"))))
    assert len(rows) == 4 * 3 * 2  # passed cells × repeats × metrics (the failed cell has none)
    assert list(rows[0]) == [
        "run_id",
        "cell_id",
        "host",
        "nccl",
        "spec",
        "repeat",
        "metric",
        "value",
        "unit",
    ]
    assert rows[0] == {
        "run_id": "20261130-142501-demo-3f9c",
        "cell_id": "default-off-0000",
        "host": "gpu01",
        "nccl": "default",
        "spec": "off",
        "repeat": "1",
        "metric": "output_throughput",
        "value": "88.5",
        "unit": "tok/s",
    }
    data = json.loads(render_report(report, "json"))
    assert len(data) == 24 and data[1]["metric"] == "median_ttft_ms" and data[1]["value"] == 39.5
    assert data[1]["unit"] == "ms"


def test_metric_choice_applies_to_csv_and_json_through_the_cli(tmp_path: Path) -> None:
    run = _run(tmp_path)

    def report(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "orchestrator", "report", str(run), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    rows = json.loads(report("--format", "json", "-m", "median_ttft_ms").stdout)
    assert len(rows) == 4 * 3 and {r["metric"] for r in rows} == {"median_ttft_ms"}
    text = report("--format", "csv", "-m", "output_throughput").stdout
    assert {r["metric"] for r in csv.DictReader(io.StringIO(text))} == {"output_throughput"}
    assert len(json.loads(report("--format", "json").stdout)) == 24  # no -m: every metric
    unknown = report("--format", "csv", "-m", "output_throughputt")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "no metric 'output_throughputt' in this run" in unknown.stderr


def test_axis_clash_and_mapping_values(tmp_path: Path) -> None:
    cell = base_cell("c-1", axes={"host": "x", "nccl": {"NCCL_ALGO": "Ring"}})
    run = write_run(tmp_path, "r", [{"cell": cell, "repeats": [{"t": 1.0}]}])
    report = build_report(load_cells(run))
    (row,) = json.loads(render_report(report, "json"))
    assert row["axis.host"] == "x" and row["host"] == "gpu01"
    assert row["nccl"] == '{"NCCL_ALGO":"Ring"}'


def test_errors(tmp_path: Path) -> None:
    cells = load_run(_run(tmp_path)).cells
    with pytest.raises(InputError, match="did you mean 'spec'"):
        build_report(cells, by="spe")
    with pytest.raises(BundleError):
        load_cells(tmp_path / "missing")
    assert len(load_cells(cells[0].path)) == 1


def test_plot_without_matplotlib_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes `import matplotlib` fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    report = build_report(load_run(_run(tmp_path)).cells)
    with pytest.raises(InputError, match=r"install orch\[plot\]"):
        plot_report(report, "spec", tmp_path / "p.png")


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs orch[plot]")
def test_plot_writes_a_png(tmp_path: Path) -> None:
    report = build_report(load_run(_run(tmp_path)).cells)
    out = plot_report(report, "spec", tmp_path / "p.png")
    assert out.read_bytes().startswith(b"\x89PNG")


def test_plot_to_a_missing_folder_or_an_unknown_format_is_an_input_error(tmp_path: Path) -> None:
    report = build_report(load_run(_run(tmp_path)).cells)
    with pytest.raises(InputError) as err:
        plot_report(report, "spec", tmp_path / "nonexist" / "dir" / "p.png")
    assert err.value.key_path == "--plot"
    assert "does not exist" in err.value.message and "folder must exist" in str(err.value.hint)
    for name in ("p.txt", "plot"):
        with pytest.raises(InputError) as err:
            plot_report(report, "spec", tmp_path / name)
        assert err.value.key_path == "--plot"
        assert ".png, .svg, .pdf" in str(err.value.hint)
    assert not (tmp_path / "p.txt").exists()


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs orch[plot]")
def test_plot_writes_svg_and_pdf(tmp_path: Path) -> None:
    report = build_report(load_run(_run(tmp_path)).cells)
    assert b"<svg" in plot_report(report, "spec", tmp_path / "p.svg").read_bytes()
    assert plot_report(report, "spec", tmp_path / "p.PDF").read_bytes().startswith(b"%PDF")


def test_spreads_are_shown_to_the_precision_of_the_value() -> None:
    from orchestrator.analyze.report.tables import MetricStats, median_and_spread

    def text(median: float, spread: float) -> str:
        return median_and_spread(MetricStats(median, spread, median, median, 3))

    assert text(1.91, 0.009525) == "1.91 ± 0.01"
    assert text(89.0, 0.5) == "89.00 ± 0.50"
    assert text(2345.6, 12.34) == "2346 ± 12"
    assert text(0.1234, 0.00056789) == "0.1234 ± 0.0006"
    assert text(1.5e-7, 2.5e-8) == "1.5e-07 ± 2.5e-08"


def test_expectation_values_in_the_footer_use_the_table_number_format(tmp_path: Path) -> None:
    from orchestrator.analyze.report.tables import footer_lines

    report = build_report(load_run(_run(tmp_path)).cells)
    row = next(r for r in report.rows if "output_throughput" in r.expectations)
    mark = row.expectations["output_throughput"]
    row.expectations["output_throughput"] = type(mark)(False, (">= 85",), 82.57498099518523)
    footer = "\n".join(footer_lines(report))
    assert "output_throughput = 82.57: expected >= 85" in footer
    assert "82.574" not in footer


def test_csv_cells_a_spreadsheet_would_run_as_formulas_are_neutralised(tmp_path: Path) -> None:
    """Issue 23 item 23: an axis value or host from someone's bundle reached a spreadsheet as
    `=HYPERLINK(...)`; numbers, negative ones included, stay numbers."""
    evil = '=HYPERLINK("http://x","y")'
    repeats = [{"output_throughput": -1.5}]
    cell = {"cell": base_cell("c-0000", axes={"mode": evil}, host="@host"), "repeats": repeats}
    report = build_report(load_run(write_run(tmp_path, "20261203-000000-x-0000", [cell])).cells)
    rows = list(csv.DictReader(io.StringIO(render_report(report, "csv"))))
    assert rows[0]["mode"] == "'" + evil and rows[0]["host"] == "'@host"
    assert rows[0]["value"] == "-1.5"


def test_a_lone_surrogate_in_a_bundle_is_printed_escaped_never_a_crash(tmp_path: Path) -> None:
    """Issue 23 item 15: "\\ud800" in bundle JSON crashed report (leaving a 0-byte -o file)
    and show."""
    cells = [
        {
            "cell": base_cell("ok-0000", axes={"m": "a\ud800"}),
            "repeats": [{"output_throughput": 1.0}],
        },
        {"cell": base_cell("bad-0000", axes={"m": "b"}), "status": "failed", "reason": "x\ud800y"},
    ]
    run = write_run(tmp_path, "20261203-000000-s-0000", cells)
    out = tmp_path / "report.md"
    out.write_text("an earlier report\n")
    for args in (["report", str(run)], ["report", str(run), "-o", str(out), "--format", "md"],
                 ["report", str(run), "--format", "csv"], ["show", f"{run}/bad-0000"]):  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True
        )
        assert proc.returncode in (0, 1), (args, proc.stderr)
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, args
    assert "\\ud800" in out.read_text()  # written whole, the surrogate escaped


def test_a_link_inside_an_unpacked_bundle_is_never_followed(tmp_path: Path) -> None:
    """Issue 23 item 22: a symbolic link in a bundle folder was followed out of it."""
    secret = tmp_path / "outside.txt"
    secret.write_text('{"output_throughput": {"median": 4242}}')
    run = write_run(tmp_path, "20261203-000000-l-0000", [{"cell": base_cell("c-0000")}])
    metrics = run / "cells" / "c-0000" / "metrics.json"
    metrics.unlink(missing_ok=True)
    metrics.symlink_to(secret)
    for args in (["report", str(run)], ["show", f"{run}/c-0000"], ["show", str(run)]):
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True
        )
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "symbolic link inside a bundle" in proc.stderr and "4242" not in proc.stdout


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs orch[plot]")
def test_dollar_signs_and_huge_repeats_plot_as_text_without_a_crash(tmp_path: Path) -> None:
    """Issue 23 item 16: `$...$` in an axis value or host crashed --plot and --format html (or was
    drawn as math); two repeats near the float range's end gave inf and a negative yerr."""
    cells = [
        {
            "cell": base_cell(f"c{i}-0000", axes={"mode": f"$x_{i}$ {i}$"}, host="h$1"),
            "repeats": [{"output_throughput": v} for v in values],
        }
        for i, values in enumerate([(1.0, 2.0, 3.0), (1.7e308, 1.79e308)])
    ]
    run = write_run(tmp_path, "20261203-000000-d-0000", cells)
    html = ["--format", "html", "-o", str(tmp_path / "r.html")]
    for args in (["--plot", str(tmp_path / "p.svg")], html):
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", "report", str(run), *args],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, (args, proc.stderr)
    assert "$x_0$ 0$" in (tmp_path / "p.svg").read_text()  # the text itself, not math
