"""`orch investigate --plan` says what stops or hinders the investigation before anything runs:
cells of different adapters, a failed side, a bundle from another machine, a budget too small
for the experiments it lists, a change already within --tolerance; and each side's own values."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from cli_helpers import run_orch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyze"))
from analyze_fixtures import base_cell, write_run

INVENTORY = "all:\n  hosts:\n    gpu01:\n      ansible_host: 192.0.2.1\n"
RUN_ID = "20261205-000000-demo-aaaa"


def _sglang_cell(cid: str, version: str) -> dict[str, Any]:
    data = base_cell(cid, version=version, env={"NCCL_ALGO": "Ring"})
    # sglang.bench_serving's adapter passes --backend sglang itself: it is in argv, not args
    data["bench"] = {
        "adapter": "sglang.bench_serving",
        "argv": ["python3", "-m", "sglang.bench_serving", "--backend", "sglang",
                 "--num-prompts", "4"],
        "args": {"num-prompts": 4},
        "repeats": 3,
    }  # fmt: skip
    return data


def _vllm_cell(cid: str) -> dict[str, Any]:
    args = {"model": "/models/m", "tensor-parallel-size": 8, "port": 8000}
    data = base_cell(cid, version="v0.10.1", args={}, env={"NCCL_ALGO": "Ring"})
    data["repo"]["url"] = "https://github.com/vllm-project/vllm.git"
    data["server"] = {
        "adapter": "vllm",
        "argv": ["vllm", "serve", "/models/m", "--tensor-parallel-size", "8", "--port", "8000"],
        "args": args,
    }
    # SGLang's client against the vLLM server: the backend declared
    data["bench"] = {
        "adapter": "sglang.bench_serving",
        "argv": ["python3", "-m", "sglang.bench_serving", "--backend", "vllm",
                 "--num-prompts", "4"],
        "args": {"backend": "vllm", "num-prompts": 4},
        "repeats": 3,
    }  # fmt: skip
    return data


def _write(
    tmp_path: Path,
    good_cell: dict[str, Any],
    bad_cell: dict[str, Any],
    good: list[float],
    bad: list[float],
    **bad_extra: Any,
) -> tuple[str, str]:
    run = write_run(tmp_path / "results", RUN_ID, [
        {"cell": good_cell, "repeats": [{"output_throughput": v} for v in good]},
        {"cell": bad_cell, "repeats": [{"output_throughput": v} for v in bad], **bad_extra},
    ])  # fmt: skip
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    return str(run / "cells" / good_cell["id"]), str(run / "cells" / bad_cell["id"])


def _runs(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "results").iterdir()}


def test_an_adapter_difference_is_named_first_and_refused(tmp_path: Path) -> None:
    """SGLang against vLLM: the old plan listed every flag as "testable" and never named the
    engines; now the adapter comes first as not swappable, nothing is testable, and a run is
    refused with the key and both cells named."""
    good, bad = _write(
        tmp_path, _sglang_cell("good-1a2b3c4d", "a" * 40), _vllm_cell("bad-5e6f7a8b"),
        [94, 95, 93, 94], [60, 61, 59, 60],
    )  # fmt: skip
    before = _runs(tmp_path)
    plan = run_orch(tmp_path, "investigate", good, bad, "-i", "hosts.yml", "--plan")
    assert plan.returncode == 0, plan.stderr
    factors = plan.stdout.split("factors (declared differences):\n", 1)[1].splitlines()
    assert factors[0] == "  server adapter: sglang (GOOD) vs vllm (BAD), not swappable: " + (
        "another engine or client"
    )
    assert ", testable" not in plan.stdout
    assert "experiments: none: GOOD and BAD run different server adapters" in plan.stdout
    done = run_orch(tmp_path, "investigate", good, bad, "-i", "hosts.yml", "--yes")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: server.adapter: GOOD (" in done.stderr and "good-1a2b3c4d" in done.stderr
    assert "sglang vs vllm" in done.stderr and "Traceback" not in done.stderr
    assert _runs(tmp_path) == before


def test_the_plan_reports_each_sides_own_values(tmp_path: Path) -> None:
    """GOOD never declared --backend; its adapter passed `--backend sglang`. The old plan said
    GOOD's was "(not set)"."""
    good_cell = _sglang_cell("good-1a2b3c4d", "a" * 40)
    bad_cell = copy.deepcopy(good_cell)
    bad_cell["id"] = "bad-5e6f7a8b"
    bad_cell["repo"]["version"] = "b" * 40
    bad_cell["bench"]["args"] = {"backend": "sglang-oai", "num-prompts": 4}
    bad_cell["bench"]["argv"][4] = "sglang-oai"
    good, bad = _write(tmp_path, good_cell, bad_cell, [94, 95, 93, 94], [60, 61, 59, 60])
    plan = run_orch(tmp_path, "investigate", good, bad, "-i", "hosts.yml", "--plan")
    assert plan.returncode == 0, plan.stderr
    assert "bench --backend: sglang (in its argv, not declared) (GOOD) vs sglang-oai (BAD)" in (
        plan.stdout
    )


def test_the_plan_says_bad_failed_and_the_bundle_needs_yes(tmp_path: Path) -> None:
    good_cell = _sglang_cell("good-1a2b3c4d", "a" * 40)
    bad_cell = _sglang_cell("bad-5e6f7a8b", "b" * 40)
    good, bad = _write(
        tmp_path, good_cell, bad_cell, [94, 95, 93, 94], [60, 61, 59],
        status="failed", reason="bench repeat 4 timed out",
    )  # fmt: skip
    plan = run_orch(tmp_path, "investigate", good, bad, "-i", "hosts.yml", "--plan")
    assert plan.returncode == 0, plan.stderr
    assert "note: BAD failed" in plan.stdout and "bench repeat 4 timed out" in plan.stdout
    assert "note: GOOD and BAD come from a bundle made on another machine" in plan.stdout
    assert "--yes" in plan.stdout


def test_the_plan_says_the_budget_is_too_small(tmp_path: Path) -> None:
    good_cell = _sglang_cell("good-1a2b3c4d", "a" * 40)
    bad_cell = _sglang_cell("bad-5e6f7a8b", "b" * 40)
    bad_cell["env"] = {"NCCL_ALGO": "PAT"}
    good, bad = _write(tmp_path, good_cell, bad_cell, [94, 95, 93, 94], [60, 61, 59, 60])
    plan = run_orch(
        tmp_path, "investigate", good, bad, "-i", "hosts.yml", "--plan", "--budget", "3"
    )
    assert plan.returncode == 0, plan.stderr
    assert "note: the budget is too small for the 4 experiments listed: 1 will not run" in (
        plan.stdout
    )
    assert "env NCCL_ALGO: PAT -> Ring" in plan.stdout.split("will not run", 1)[1]


def test_the_plan_says_the_change_is_within_the_tolerance(tmp_path: Path) -> None:
    good_cell = _sglang_cell("good-1a2b3c4d", "a" * 40)
    bad_cell = _sglang_cell("bad-5e6f7a8b", "b" * 40)
    good, bad = _write(
        tmp_path, good_cell, bad_cell, [94.0, 94.1, 93.9, 94.0, 94.05],
        [92.5, 92.6, 92.4, 92.5, 92.55],
    )  # fmt: skip
    plan = run_orch(
        tmp_path, "investigate", good, bad, "-i", "hosts.yml", "--plan", "--tolerance", "3%"
    )
    assert plan.returncode == 0, plan.stderr
    assert "note: the recorded change, -1.6%, is already within --tolerance 3%" in plan.stdout
    assert "runs nothing" in plan.stdout
