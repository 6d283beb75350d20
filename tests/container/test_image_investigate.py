"""`orch investigate GOOD BAD` where GOOD and BAD ran different images, end to end against
real Podman and a registry on loopback: the image is a factor, `--plan` lists it, and BAD with
GOOD's image runs GOOD's recorded digest. GOOD's tag is moved to BAD's image before the
investigation, so an experiment that resolved the tag again would run the slow image and find
the image ruled out; pinned, it finds that the image explains the change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from container.podman_parts import _free_port, _run
from orchestrator.sim.images import STUDY, study_playbook


def _orch(tmp_path: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *argv, "--results", "results"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500,
    )  # fmt: skip


def test_investigate_sets_the_image_back_by_goods_recorded_digest_and_it_explains(
    podman_env: dict[str, str],
    sim_tags: dict[str, str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    tags = {v: sim_tags[v] for v in STUDY}
    book = study_playbook(tags, podman_env["CONTAINERS_CONF"], _free_port(), repeats=3, prompts=4)
    (tmp_path / "pb.yml").write_text(yaml.safe_dump(book))
    (tmp_path / "home").mkdir()
    env = {**podman_env, "HOME": str(tmp_path / "home")}
    done = _orch(tmp_path, env, "apply", "pb.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    cells: dict[str, str] = {}
    digests: dict[str, str] = {}
    for cell in sorted((tmp_path / "results").glob("*/cells/*")):
        pin = json.loads((cell / "cell.json").read_text())["cell"]["server"]["container"]
        version = pin["image"].rsplit(":", 1)[1]
        cells[version], digests[version] = f"{cell.parent.parent.name}/{cell.name}", pin["digest"]
    assert set(cells) == {"v1", "v2"} and digests["v1"] != digests["v2"]
    # GOOD's tag now names BAD's image: only GOOD's recorded digest brings back v1
    copy = ["skopeo", "copy", "--src-tls-verify=false", "--dest-tls-verify=false"]
    _run([*copy, f"docker://{tags['v2']}", f"docker://{tags['v1']}"], podman_env)
    back = f"docker://{tags['v1'].rsplit(':', 1)[0]}@{digests['v1']}"  # for the session's others
    request.addfinalizer(lambda: _run([*copy, back, f"docker://{tags['v1']}"], podman_env))
    short = {v: d[:19] for v, d in digests.items()}
    label = f"image: {tags['v2']} ({short['v2']}) -> {tags['v1']} ({short['v1']})"

    plan = _orch(tmp_path, env, "investigate", cells["v1"], cells["v2"], "--starts", "1", "--plan")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert f"  image: {tags['v1']} ({short['v1']}) (GOOD) vs " in plan.stdout, plan.stdout
    assert f"  3. {label}" in plan.stdout, plan.stdout

    ran = _orch(tmp_path, env, "investigate", cells["v1"], cells["v2"], "--starts", "1")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (folder,) = [p for p in (tmp_path / "results").glob("*") if (p / "investigation.json").exists()]
    doc = json.loads((folder / "investigation.json").read_text())
    assert doc["reproduction"]["outcome"] == "reproduces", doc["reproduction"]
    verdicts = {e["label"]: e["verdict"] for e in doc["experiments"]}
    assert verdicts == {label: "explains"}, verdicts
    assert doc["verdict"].startswith(f"the change follows {label}"), doc["verdict"]
    # the experiment's cell ran GOOD's digest, though the tag names v2 now
    experiment = folder / doc["cells"][label]["path"]
    record = json.loads((experiment / "server.json").read_text())["container"]
    assert record["digest"] == digests["v1"] and "tag_moved_to" not in record
    assert record["image_id"] == record["running_image_id"]
    image = json.loads((experiment / "snapshot.image.json").read_text())
    assert image["labels"] == {"org.opencontainers.image.version": "v1"}
