"""scripts/demo_container.sh as a user runs it: it builds the simulator's two images (cached),
starts a registry on loopback, runs the two-image study and prints `orch diff` of the v1 and
the v2 cell with the image named first; the bundle records each cell's digest and the packages
read inside its image."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from container.podman_parts import IMAGE_CACHE

ROOT = Path(__file__).resolve().parents[2]


def test_the_container_demo_runs_the_study_and_names_the_image_first(
    podman_env: dict[str, str],
    tmp_path: Path,
) -> None:
    env = {
        **podman_env,
        "ORCH_IMAGE_CACHE": str(IMAGE_CACHE),  # the session's roots: built once
        "ORCH_DEMO_RESULTS": str(tmp_path / "results"),
        "ORCH_DEMO_REPEATS": "3",
    }
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo_container.sh")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    after = out[out.index("orch diff of the v1 and the v2 cell:") :].splitlines()
    assert after[3].startswith("image: 127.0.0.1:") and "/orch/sim:v1 (sha256:" in after[3], out
    assert after[3].endswith("/orch/sim:v2 (sha256:" + after[3].split("(sha256:")[2])
    assert "packages inside: orch-sim-kernels 1.0 -> 1.1" in after[3]
    (run_json,) = (tmp_path / "results").glob("*/run.json")
    run = run_json.parent
    for cell in (run / "cells").iterdir():
        record = json.loads((cell / "server.json").read_text())["container"]
        assert record["digest"].startswith("sha256:") and len(record["digest"]) == 71
        assert any(line.startswith("orch-sim-kernels==") for line in record["inside"]["freeze"])
        assert json.loads((cell / "env_check.json").read_text())["ok"]
    assert list(IMAGE_CACHE.glob("*/sim-v*.tar"))  # built once, kept for the next run
