"""Helpers for the results tests: fixture paths and realistic cell directories."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
FAKE_SMI = FIXTURES / "fake-nvidia-smi"
PLANTED = "hf_PlantedSecretValue0123456789"  # a token that must never reach a bundle


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def make_cell_dir(
    root: Path,
    cell_id: str,
    *,
    status: str = "passed",
    host: str = "gpu01",
    axes: dict[str, Any] | None = None,
    secret: str = PLANTED,
) -> Path:
    """A cell directory as the runner leaves it (ARCHITECTURE.md), with `secret` leaked inside."""
    cell = root / cell_id
    cell.mkdir(parents=True)
    spec = {
        "schema_version": 1,
        "id": cell_id,
        "playbook": "demo",
        "host": host,
        "axes": axes or {"spec": "eagle3-2"},
        "env": {"NCCL_ALGO": "Ring", "HF_TOKEN": "***REDACTED***"},
        "secrets": ["HF_TOKEN"],
        "bench": {"adapter": "generic", "argv": ["python3", "bench.py"]},
    }
    _write_json(
        cell / "cell.json",
        {
            "schema_version": 1,
            "cell": spec,
            "status": status,
            "reason": None if status == "passed" else "server exited during startup (rc 1)",
            "failed_step": None if status == "passed" else "ready",
            "steps": {"repo": {"status": "ok", "start": 1.0, "end": 2.0}},
            "runner": {"python": "3.10.12"},
        },
    )
    (cell / "events.jsonl").write_text(
        '{"event": "step", "step": "repo", "status": "start", "t": 1.0}\nnot json\n'
        + json.dumps({"event": "done", "status": status})
        + "\n"
    )
    _write_json(cell / "repo.json", {"requested": "main", "sha": "a" * 40, "dirty": False})
    (cell / "setup.log").write_text("cached\n")
    _write_json(cell / "snapshot.pre.json", {"schema_version": 1, "hostname": host})
    _write_json(cell / "snapshot.post.json", {"schema_version": 1, "hostname": host})
    (cell / "server.log").write_text(
        f"starting with HF_TOKEN={secret}\nNCCL version 2.21.5+cuda12.4\nready\n"
    )
    _write_json(
        cell / "server.json",
        {"argv": ["python3", "-m", "sglang.launch_server"], "pid": 123, "pgid": 123},
    )
    _write_json(
        cell / "env_check.json",
        {
            "mode": "strict",
            "ok": True,
            "declared": ["HF_TOKEN", "NCCL_ALGO"],
            "processes": [
                {"pid": 123, "vars": {"HF_TOKEN": {"expected": secret, "observed": secret}}}
            ],
            "mismatches": [],
        },
    )
    _write_json(cell / "captures" / "server_info.ready.json", {"tp_size": 8})
    _write_json(cell / "captures" / "server_info.after-1.json", {"tp_size": 8, "n": 1})
    for name in ("warmup-1", "1", "2", "10"):
        rdir = cell / "bench" / name
        rdir.mkdir(parents=True)
        (rdir / "stdout").write_text(f"output_throughput: 9{len(name)}.5\n")
        (rdir / "stderr").write_text("")
        _write_json(rdir / "exit.json", {"rc": 0, "seconds": 1.5, "argv": [], "timed_out": False})
    return cell


def make_cell_archive(cell_dir: Path, out: Path) -> Path:
    """`<cell>.tar.gz` holding `<cell_id>/...`, as the runner writes it."""
    with tarfile.open(out, "w:gz") as tar:
        tar.add(cell_dir, arcname=cell_dir.name)
    return out


def files_containing(root: Path, needle: str) -> list[Path]:
    """Every regular file under `root` whose bytes contain `needle`."""
    return [
        p
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and needle.encode() in p.read_bytes()
    ]
