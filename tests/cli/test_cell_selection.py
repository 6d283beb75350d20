"""`--cells` picks cells on plan and apply (one selector syntax with bisect/audit/replay), and
`apply --resume RUN --retry-failed` runs a run's failed cells again: through the real CLI, on
the local connection, with a tiny generic bench."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from cli_helpers import run_orch

# cell a=2 fails until MARK exists (it creates it): the first try fails, a retry passes
BENCH = (
    "import os, sys; a, mark = sys.argv[1], sys.argv[2]; print('x 1.0'); "
    "ok = a != '2' or os.path.exists(mark); open(mark, 'w').close() if a == '2' else None; "
    "sys.exit(0 if ok else 1)"
)


def orch(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_orch(cwd, *args, home=cwd / "home", env=env)


def _playbook(tmp: Path) -> None:
    playbook = {
        "name": "picks",
        "matrix": {"a": [1, 2, 3], "nccl": ["default", "tuned"]},
        "bench": {
            "command": ["{{ orch_python }}", "-c", BENCH, "{{ matrix.a }}", str(tmp / "mark")],
            "metrics": {"x": r"x ([0-9.]+)"},
        },
        "snapshot": {"pip_freeze": False, "topo": False},
    }
    (tmp / "playbook.yml").write_text(yaml.safe_dump(playbook))


def _plan_rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if " localhost " in line]


def test_plan_cells_selects_with_equals_not_equals_and_globs(tmp_path: Path) -> None:
    _playbook(tmp_path)
    picked = orch(tmp_path, "plan", "playbook.yml", "--cells", "a!=2,nccl=tun*")
    assert picked.returncode == 0, picked.stderr
    rows = _plan_rows(picked.stdout)
    assert sorted((r[2], r[3]) for r in rows) == [("1", "tuned"), ("3", "tuned")], picked.stdout
    assert "2 cells on 1 host(s)" in picked.stdout

    by_host = orch(tmp_path, "plan", "playbook.yml", "--cells", "host=local*,a=3")
    assert len(_plan_rows(by_host.stdout)) == 2, by_host.stdout + by_host.stderr

    by_prefix = orch(tmp_path, "plan", "playbook.yml", "--cells", "3-")
    assert {r[0][:2] for r in _plan_rows(by_prefix.stdout)} == {"3-"}, by_prefix.stdout
    by_glob = orch(tmp_path, "plan", "playbook.yml", "--cells", "*-default-*")
    assert [(r[2], r[3]) for r in _plan_rows(by_glob.stdout)] == [
        ("1", "default"),
        ("2", "default"),
        ("3", "default"),
    ], by_glob.stdout


def test_a_selector_matching_nothing_names_what_exists(tmp_path: Path) -> None:
    _playbook(tmp_path)
    none = orch(tmp_path, "plan", "playbook.yml", "--cells", "nccl=fast")
    assert none.returncode == 2, none.stdout + none.stderr
    assert none.stderr.count("\n") == 1, none.stderr
    assert "matches no cell" in none.stderr
    assert "a=1|2|3; nccl=default|tuned; host=localhost" in none.stderr, none.stderr

    unknown = orch(tmp_path, "apply", "playbook.yml", "--cells", "ncl=tuned")
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr
    assert "unknown axis 'ncl'" in unknown.stderr and "nccl=default|tuned" in unknown.stderr
    assert not (tmp_path / "results").exists()  # nothing ran


def test_apply_runs_only_the_selected_cells(tmp_path: Path) -> None:
    _playbook(tmp_path)
    done = orch(tmp_path, "apply", "playbook.yml", "--cells", "a=1,nccl!=tuned")
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    cells = json.loads((run / "run.json").read_text())["cells"]
    assert list(cells) == [c.name for c in (run / "cells").iterdir()]
    assert len(cells) == 1 and next(iter(cells.values()))["status"] == "passed", cells


def test_retry_failed_runs_the_failed_cells_again(tmp_path: Path) -> None:
    _playbook(tmp_path)
    first = orch(tmp_path, "apply", "playbook.yml", "--cells", "nccl=default")
    assert first.returncode == 1, first.stdout + first.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    cells = json.loads((run / "run.json").read_text())["cells"]
    failed = [cid for cid, c in cells.items() if c["status"] == "failed"]
    assert len(failed) == 1 and len(cells) == 3, cells

    # a plain resume keeps the failure (nothing reruns)
    kept = orch(tmp_path, "apply", "playbook.yml", "--cells", "nccl=default", "--resume", run.name)
    assert kept.returncode == 1, kept.stdout + kept.stderr

    again = orch(
        tmp_path,
        "apply",
        "playbook.yml",
        "--cells",
        "nccl=default",
        "--resume",
        run.name,
        "--retry-failed",
    )
    assert again.returncode == 0, again.stdout + again.stderr
    doc = json.loads((run / "run.json").read_text())
    assert doc["status"] == "passed" and all(c["status"] == "passed" for c in doc["cells"].values())
    cell = json.loads((run / "cells" / failed[0] / "cell.json").read_text())
    assert cell["status"] == "passed"
    # the failed attempt is kept as evidence, and the manifest covers the bundle as it is
    aside = json.loads((run / "retried" / f"{failed[0]}.1" / "cell.json").read_text())
    assert aside["status"] == "failed"
    audit = orch(tmp_path, "audit", run.name, "--no-drift")
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_retry_failed_needs_resume(tmp_path: Path) -> None:
    _playbook(tmp_path)
    refused = orch(tmp_path, "apply", "playbook.yml", "--retry-failed")
    assert refused.returncode == 2 and "--retry-failed needs --resume" in refused.stderr
    assert not (tmp_path / "results").exists()


def test_bisect_and_audit_take_the_same_selector(tmp_path: Path) -> None:
    _playbook(tmp_path)
    bisect = orch(
        tmp_path, "bisect", "playbook.yml", "--cell", "nccl=fast", "--good", "a", "--bad", "b"
    )
    assert bisect.returncode == 2, bisect.stdout + bisect.stderr
    assert "matches no cell" in bisect.stderr and "nccl=default|tuned" in bisect.stderr

    done = orch(tmp_path, "apply", "playbook.yml", "--cells", "a=1")
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    audit = orch(tmp_path, "audit", run.name, "--no-drift", "--rerun", "--cells", "nccl=fast")
    assert audit.returncode == 2, audit.stdout + audit.stderr
    assert "the cells have a=1; nccl=default|tuned; host=localhost" in audit.stderr
    rerun = orch(tmp_path, "audit", run.name, "--no-drift", "--rerun", "--cells", "nccl!=tuned")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
