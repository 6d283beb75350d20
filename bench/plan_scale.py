"""Expand and render 100,000 cells and print how long it took.

A 10×10×10×10×10 matrix on one host (the generic adapters), with templated env, server and
bench commands, flag mappings that read axes through variables, a repo version and a `where`
that keeps every point. Run: `.venv/bin/python bench/plan_scale.py [--profile]`.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.config.host import localhost_inventory
from orchestrator.config.loaded import LoadedPlaybook
from orchestrator.config.model import PlaybookModel
from orchestrator.plan.build import build_cells


def scale_playbook(size: int = 10) -> LoadedPlaybook:
    """A playbook whose matrix has 5 axes of `size` values each."""
    data: dict[str, Any] = {
        "name": "plan-scale",
        "vars": {
            "model": "/models/m",
            "port": 30000,
            "nccl": {
                f"n{i}": {"NCCL_MIN_NCHANNELS": 4 * i, "NCCL_ALGO": "Ring"} for i in range(size)
            },
            "draft_path": "{{ model }}-draft",
            "spec": {
                f"s{i}": {
                    "speculative-num-steps": i,
                    "speculative-draft-model-path": "{{ draft_path }}",
                }
                for i in range(size)
            },
        },
        "matrix": {
            "commit": [f"c{i:07x}" for i in range(size)],
            "nccl": [f"n{i}" for i in range(size)],
            "spec": [f"s{i}" for i in range(size)],
            "batch": [2**i for i in range(size)],
            "input_len": [128 * (i + 1) for i in range(size)],
            "where": "matrix.batch > 0",
        },
        "repo": {
            "url": "https://example.com/serving.git",
            "dest": "/srv/serving",
            "version": "{{ matrix.commit }}",
            "setup": "pip install -e python --no-deps --model {{ model }}",
        },
        "env": [{"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1"}, "{{ nccl[matrix.nccl] }}"],
        "server": {
            "command": "python -m server --model {{ model }} --port {{ port }} --tp 8",
            "port": "{{ port }}",
            "ready": {"path": "/health"},
            "args": [{"model-path": "{{ model }}", "tp-size": 8}, "{{ spec[matrix.spec] }}"],
        },
        "bench": {
            "command": (
                "python -m bench --port {{ port }} --batch {{ matrix.batch }}"
                " --input-len {{ matrix.input_len }} --out result.json"
            ),
            "args": {"num-prompts": "{{ matrix.batch * 4 }}"},
            "result_file": "result.json",
            "warmup": 1,
            "repeats": 3,
        },
        "expect": {"output_throughput": {"ref": 90, "tolerance": "5%"}},
        "timeouts": {"cell": 3600, "ready": 1200},
    }
    path = Path("bench/plan_scale.yml")
    return LoadedPlaybook(
        path=path, data=data, model=PlaybookModel.model_validate(data), files=(path,)
    )


def main(argv: list[str]) -> int:
    """Time build_cells on the scale playbook (optionally under cProfile)."""
    playbook = scale_playbook()
    inventory = localhost_inventory()
    profiler = cProfile.Profile() if "--profile" in argv else None
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    cells = build_cells(playbook, inventory)
    if profiler is not None:
        profiler.disable()
    seconds = time.perf_counter() - start
    print(f"{len(cells)} cells in {seconds:.2f} s ({len(cells) / seconds:,.0f} cells/s)")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
