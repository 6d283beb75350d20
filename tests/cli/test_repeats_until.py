"""`bench.repeats: {min, max, until}` through the real CLI: the runner stops a quiet cell once its
median is known, runs a noisy one to max and marks it, and plan, show and report say so."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_helpers import run_orch

# Each repeat prints the value of its number (ORCH_REPEAT) from the cell's sequence.
PLAYBOOK = """\
name: until
vars:
  values:
    quiet: "100 100.4 99.6 100.2 99.9 100.1 99.8 100.3"
    loud: "100 125 80 118 84 121 79 115"
matrix:
  noise: [quiet, loud]
bench:
  command: ["{python}", "-c", "{script}", "{{{{ values[matrix.noise] }}}}"]
  metrics: {{tput: 'tput=([0-9.]+)'}}
  repeats: {{min: 3, max: 8, until: 2%, metric: tput}}
"""
SCRIPT = "import os,sys; print('tput=' + sys.argv[1].split()[int(os.environ['ORCH_REPEAT']) - 1])"


def _playbook(tmp_path: Path) -> Path:
    path = tmp_path / "pb.yml"
    path.write_text(PLAYBOOK.format(python=sys.executable, script=SCRIPT))
    return path


def _cells(results: Path) -> dict[str, Path]:
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    return {p.name.split("-")[0]: p for p in (run / "cells").iterdir()}


def test_a_quiet_cell_stops_when_settled_and_a_loud_one_runs_to_max(tmp_path: Path) -> None:
    _playbook(tmp_path)
    proc = run_orch(tmp_path, "apply", "pb.yml", "--results", "res")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = _cells(tmp_path / "res")
    quiet, loud = cells["quiet"], cells["loud"]
    assert f"{quiet.name}: bench settled after 6 repeats" in proc.stderr, proc.stderr
    assert f"{loud.name}: bench reached its max after 8 repeats" in proc.stderr
    # 90% over the looks up to 8 is 96.7% a look: [min, max] from 6 values, the quiet six
    # within 0.4% of their median
    assert sorted(p.name for p in (quiet / "bench").iterdir()) == ["1", "2", "3", "4", "5", "6"]
    assert len(list((loud / "bench").iterdir())) == 8
    ran = json.loads((quiet / "repeats.json").read_text())
    assert (ran["ran"], ran["stopped"]) == (6, "settled")
    assert json.loads((loud / "repeats.json").read_text())["stopped"] == "max"
    assert json.loads((quiet / "bench" / "3" / "exit.json").read_text())["watched"] == {
        "tput": 99.6
    }
    settle = json.loads((quiet / "metrics.json").read_text())["settle"]
    assert settle["settled"] and settle["ran"] == 6 and settle["chosen"] == "metric"
    assert settle["metrics"]["tput"]["low"] == 99.6 and settle["metrics"]["tput"]["high"] == 100.4
    loud_doc = json.loads((loud / "metrics.json").read_text())
    assert not loud_doc["settle"]["settled"]
    assert any(n.startswith("did not settle in 8 repeats: tput") for n in loud_doc["notes"])
    status = json.loads((loud / "cell.json").read_text())["status"]
    assert status == "passed"  # marked, not failed: the numbers are real, only loose

    shown = run_orch(tmp_path, "show", str(loud))
    assert "repeats   8 of 3..8: DID NOT SETTLE, tput" in shown.stdout, shown.stdout
    shown = run_orch(tmp_path, "show", str(quiet))
    assert "repeats   6 of 3..8: settled, tput 100 [99.6, 100.4] ±0.4%" in shown.stdout
    report = run_orch(tmp_path, "report", str(quiet.parent.parent), "-m", "tput")
    assert report.returncode == 0, report.stderr
    assert f"≈ {loud.name}: did not settle in 8 repeats" in report.stdout, report.stdout
    assert f"≈ {quiet.name}" not in report.stdout


def test_plan_says_how_the_repeats_stop(tmp_path: Path) -> None:
    _playbook(tmp_path)
    proc = run_orch(tmp_path, "plan", "pb.yml", "-v")
    assert proc.returncode == 0, proc.stderr
    assert (
        "repeats: 0 warmup + 3..8 until the median of tput is within ±2% "
        "(90% interval; chosen by metric)"
    ) in proc.stdout


@pytest.mark.parametrize(
    ("repeats", "message"),
    [
        ("{min: 3, max: 8, until: 2%, metrc: tput}", "bench.repeats.metrc: unknown key 'metrc'"),
        ("{min: 3, max: 8}", "bench.repeats: repeats needs until"),
        ("{min: 9, max: 8, until: 2%}", "bench.repeats.min: min 9 is above max 8"),
        ("{max: 8, until: fast}", "bench.repeats.until: bad tolerance 'fast'"),
        ("{max: 8, until: 2%, confidence: 2}", "bench.repeats.confidence: confidence 2"),
        ("{max: 4, until: 2%, metric: tput}", "bench.repeats.max: max 4 can never settle"),
        ("{max: 8, until: 2%, metric: ttft}", "bench.repeats.metric: the generic bench cannot"),
        ("{max: 8, until: 2%}", "bench.repeats: repeats: {until} needs a metric to settle on"),
        ("true", "bench.repeats: expected an integer >= 1 or {min, max, until}"),
    ],
)
def test_a_bad_rule_is_one_located_error_and_nothing_runs(
    tmp_path: Path, repeats: str, message: str
) -> None:
    text = PLAYBOOK.format(python=sys.executable, script=SCRIPT).replace(
        "{min: 3, max: 8, until: 2%, metric: tput}", repeats
    )
    (tmp_path / "pb.yml").write_text(text)
    proc = run_orch(tmp_path, "apply", "pb.yml", "--results", "res")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: pb.yml:"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").iterdir())
