"""Podman inside the test Slurm's jobs: `orch apply` on a Slurm login host runs the simulator's
server in its pinned image inside the cell's job (the node's network namespace), pulled from
a registry the node reaches at the controller's address. The node mounts the cgroup
hierarchies a real node has (tests/slurmcluster.py), without which runc cannot start a
container in a job (docs/FACTS.md, "Containers")."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from container.podman_parts import IMAGE_CACHE, digest_of, podman_env, serve_registry  # noqa: F401
from slurm_helpers import apply, free_port, jobs_since, next_job_id, run_dir, write_inventory
from slurmcluster import SlurmTestCluster

from orchestrator.sim.images import push_images, study_playbook


def test_the_sim_server_runs_in_its_pinned_image_inside_a_slurm_job(
    slurm_cluster: SlurmTestCluster,
    podman_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    with serve_registry(tmp_path / "registry", slurm_cluster.controller_address) as registry:
        tags = push_images(registry, IMAGE_CACHE, podman_env, ["v1"])
        digest = digest_of(tags["v1"], podman_env)
        book = study_playbook(
            tags, podman_env["CONTAINERS_CONF"], free_port(), repeats=1, prompts=2,
            name="slurm-image",
        )  # fmt: skip
        playbook = tmp_path / "playbook.yml"
        playbook.write_text(yaml.safe_dump(book))
        first = next_job_id(slurm_cluster)
        done = apply(slurm_cluster, tmp_path, playbook, write_inventory(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (job,) = jobs_since(slurm_cluster, first)
    assert job["state"] == "COMPLETED" and job["nodes"].startswith("node"), job
    (cell,) = (run_dir(tmp_path) / "cells").iterdir()
    server = json.loads((cell / "server.json").read_text())
    record = server["container"]
    assert record["digest"] == digest and record["image_id"] == record["running_image_id"]
    assert server["argv"][:2] == ["podman", "run"]
    checked = json.loads((cell / "env_check.json").read_text())
    assert checked["ok"], checked
    workers = [p for p in checked["processes"] if "worker" in p["cmdline"]]
    assert len(workers) == 2, checked["processes"]  # the TP workers, inside the container
    inside = json.loads((cell / "snapshot.image.json").read_text())["inside"]
    assert "orch-sim-kernels==1.0" in inside["freeze"], inside
