"""`orch bisect --images` over four sim images against real Podman and a registry on loopback:
v1 and v1.1 decode at one speed, v2 and v2.1 slower (a performance model inside the image).
Each image is pinned to its digest once and recorded; the noise-aware search and its
confirmation name v2, the third, as the first bad image."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from container.podman_parts import _free_port, _run, digest_of
from orchestrator.app.bisect import BisectRequest, prepare_bisect
from orchestrator.app.plan import load_plan
from orchestrator.sim.images import VERSIONS, study_playbook


def test_bisect_over_four_images_names_the_third_as_the_first_bad_one(
    podman_env: dict[str, str],
    sim_tags: dict[str, str],
    tmp_path: Path,
) -> None:
    tags = {v: sim_tags[v] for v in VERSIONS}
    assert list(tags) == ["v1", "v1.1", "v2", "v2.1"]
    inspect = ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}"]
    digests = {v: _run([*inspect, f"docker://{t}"], podman_env).strip() for v, t in tags.items()}
    assert len(set(digests.values())) == 4
    book = study_playbook(
        {"v1": tags["v1"]}, podman_env["CONTAINERS_CONF"], _free_port(), repeats=3, prompts=4
    )
    (tmp_path / "pb.yml").write_text(yaml.safe_dump(book))
    (tmp_path / "home").mkdir()
    env = {**podman_env, "HOME": str(tmp_path / "home")}
    # one image by its digest, the others by tag: each is pinned once either way
    images = [tags["v1"], tags["v1.1"], f"{tags['v2'].rsplit(':', 1)[0]}@{digests['v2']}"]
    images.append(tags["v2.1"])
    argv = ["bisect", "pb.yml", "--cell", "*", "--images", ",".join(images)]
    argv += ["--metric", "output_throughput", "--end-repeats", "3", "--repeats", "4"]
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *argv, "--results", "results"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=580,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = (tmp_path / "results").glob("*")
    doc = json.loads((run / "bisect.json").read_text())
    recorded = [(i["image"], i["digest"]) for i in doc["images"]]
    assert recorded == list(zip(images, digests.values(), strict=True))
    result = doc["result"]
    assert result["first_bad"] == images[2] and result["confirmed"] is True, result
    assert result["message"].startswith(f"{images[2]} is the first bad image"), result["message"]
    # every step ran the digest it was pinned to
    for cell in (run / "cells").glob("*"):
        server = json.loads((cell / "server.json").read_text())["container"]
        assert server["digest"] in digests.values() and "tag_moved_to" not in server
    assert any(line.split()[:2] == ["#", "image"] for line in done.stdout.splitlines())


def test_a_commit_bisect_of_a_cell_in_a_container_pins_its_image_once(
    podman_env: dict[str, str],
    sim_tags: dict[str, str],
    tmp_path: Path,
) -> None:
    tags = {"v1": sim_tags["v1"]}
    digest = digest_of(tags["v1"], podman_env)
    book = study_playbook(tags, podman_env["CONTAINERS_CONF"], _free_port())
    (tmp_path / "pb.yml").write_text(yaml.safe_dump(book))
    plan = load_plan(tmp_path / "pb.yml")
    job = prepare_bisect(plan, BisectRequest(selector="*", good="a", bad="b"))
    assert job.setup.base.server is not None and job.setup.base.server.container is not None
    # unpinned, every step's server would be refused by the runner ("not pinned to a digest")
    assert job.setup.base.server.container.digest == digest
