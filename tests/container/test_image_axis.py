"""An image as a matrix axis (`server.container.image: "{{ matrix.image }}"`), end to end
against real Podman and a registry on loopback: each cell is pinned to its own tag's digest
and runs in a server session of its own; v2 (a slower performance model inside the image) is
measured slower, and `orch diff` of a v1 and a v2 cell names the image first, with the
package that differs inside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from container.podman_parts import _free_port, digest_of
from orchestrator.sim.images import STUDY, study_playbook


def test_two_images_as_an_axis_run_pinned_each_in_its_own_session(
    podman_env: dict[str, str],
    sim_tags: dict[str, str],
    tmp_path: Path,
) -> None:
    tags = {v: sim_tags[v] for v in STUDY}
    digests = {v: digest_of(tag, podman_env) for v, tag in tags.items()}
    assert digests["v1"] != digests["v2"]
    book = study_playbook(tags, podman_env["CONTAINERS_CONF"], _free_port(), repeats=2, prompts=4)
    # A bench axis too: the cells of one image share its server, those of the other do not.
    book["matrix"]["conc"] = [1, 2]
    book["bench"]["args"]["max-concurrency"] = "{{ matrix.conc }}"
    (tmp_path / "pb.yml").write_text(yaml.safe_dump(book))
    (tmp_path / "home").mkdir()
    env = {**podman_env, "HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "apply", "pb.yml", "--results", "results"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    cells = sorted((tmp_path / "results").glob("*/cells/*"))
    assert len(cells) == 4
    by_version: dict[str, Path] = {}
    sessions: dict[str, set[str]] = {"v1": set(), "v2": set()}
    reads: dict[str, list[dict[str, object]]] = {"v1": [], "v2": []}
    for cell in cells:
        record = json.loads((cell / "server.json").read_text())["container"]
        version = record["image"].rsplit(":", 1)[1]
        assert record["digest"] == digests[version]  # each cell its own tag's digest
        assert record["image_id"] == record["running_image_id"]
        info = json.loads((cell / "cell.json").read_text())
        assert info["status"] == "passed"
        sessions[version].add(info["session"]["key"])
        image = json.loads((cell / "snapshot.image.json").read_text())
        assert image["labels"] == {"org.opencontainers.image.version": version}
        kernels = "1.0" if version == "v1" else "1.1"
        assert f"orch-sim-kernels=={kernels}" in image["inside"]["freeze"], image
        reads[version].append(image["inside"])
        if info["session"]["started_server"]:
            by_version[version] = cell
    # one server per digest, its two cells in it, the later one reusing the first one's read
    assert len(sessions["v1"]) == len(sessions["v2"]) == 1 and sessions["v1"] != sessions["v2"]
    assert set(by_version) == {"v1", "v2"}
    assert reads["v1"][0] == reads["v1"][1] and reads["v2"][0] == reads["v2"][1]
    argv = [
        sys.executable,
        "-m",
        "orchestrator",
        "diff",
        str(by_version["v1"]),
        str(by_version["v2"]),
    ]
    diff = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    lines = diff.stdout.splitlines()
    short = {v: d.split(":")[1][:12] for v, d in digests.items()}
    headline = (
        f"image: {tags['v1']} (sha256:{short['v1']}) -> {tags['v2']} (sha256:{short['v2']}); "
        "packages inside: orch-sim-kernels 1.0 -> 1.1"
    )
    assert lines[2] == headline, diff.stdout + diff.stderr
    assert "  label org.opencontainers.image.version: v1 -> v2" in lines
    metrics = diff.stdout[diff.stdout.index("[metrics]") :]
    assert "throughput" in metrics, diff.stdout
    assert os.path.isdir(by_version["v2"])
