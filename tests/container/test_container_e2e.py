"""`orch apply` of the simulator's server inside a container (podman, a registry on loopback):
the image is built here from a scratch root with the host's Python, venv and this checkout
mounted read-only, pushed, resolved by tag at plan time and run by digest. The env is verified
in every process inside the container, the bundle records the image, and a SIGKILLed runner
leaves no container running 30 s later; a pull that fails fails the cell with its reason."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from container.podman_parts import _free_port, _run, digest_of
from orchestrator.sim.images import host_mounts, study_playbook
from orchestrator.sim.repo import SETUP_COMMAND, init_repo


@pytest.fixture
def sim_image(sim_tags: dict[str, str]) -> tuple[str, list[str]]:
    """The tag of the simulator's v1 image (the session's push), and the mounts it runs with."""
    return sim_tags["v1"], [f"{p}:{p}:ro" for p in host_mounts()]


def _playbook(
    image: str, conf: str, port: int, repeats: int, *, bench_in_image: bool = False
) -> str:
    """The image study's playbook (sim/images.py), one image, one prompt a repeat."""
    book = study_playbook(
        {"v1": image}, conf, port, repeats=repeats, prompts=1, concurrency=1, name="contained",
        bench_in_image=bench_in_image,
    )  # fmt: skip
    book["snapshot"]["pip_freeze"] = True
    return yaml.safe_dump(book)


def _apply(tmp_path: Path, text: str, env: dict[str, str], *more: str) -> subprocess.Popen[str]:
    (tmp_path / "pb.yml").write_text(text)
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "apply", "pb.yml", "--results", "results", *more],
        cwd=tmp_path,
        env={**env, "HOME": str(tmp_path / "home")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _cell(tmp_path: Path) -> Path:
    (cell,) = (tmp_path / "results").glob("*/cells/*")
    return cell


def test_the_sim_server_runs_in_its_pinned_image_with_its_env_verified_inside(
    podman_env: dict[str, str],
    sim_image: tuple[str, list[str]],
    tmp_path: Path,
) -> None:
    tag, mounts = sim_image
    conf = podman_env["CONTAINERS_CONF"]
    digest = digest_of(tag, podman_env)
    # A container of a dead runner (by its labels): the cell's preflight stops it.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"orch-stale-{os.getpid()}"
    volumes = [a for m in mounts for a in ("--volume", m)]
    _run(
        ["podman", "run", "-d", "--rm", "--name", stale, "--label", "orch.cell=old",
         "--label", f"orch.runner-pid={dead.pid}", *volumes, "--tls-verify=false",
         f"{tag.rsplit(':', 1)[0]}@{digest}", "/usr/bin/sleep", "600"],
        podman_env,
    )  # fmt: skip
    # The bench in the server's image too (`bench.container` the same section): shared.
    book = yaml.safe_load(_playbook(tag, conf, _free_port(), 1, bench_in_image=True))
    # A repo pin and the image together (the source mounted into the image): the server
    # reads the pinned commit's model from its checkout, and says which file it found.
    repo = init_repo(tmp_path / "repo", commits=3, regress_at=2, seed=5)
    dest = tmp_path / "src"
    book["repo"] = {"url": str(repo.path), "dest": str(dest), "version": "bad",
                    "setup": SETUP_COMMAND}  # fmt: skip
    del book["server"]["args"]["sim-model"]
    say_model = 'sha256sum orch_sim_model.json; exec "$@"'
    serve = ["{{ orch_python }}", "-m", "orchestrator.sim", "serve"]
    book["server"]["launcher"] = ["sh", "-c", say_model, "sh", *serve]
    book["server"]["container"].update(workdir=str(dest))
    book["server"]["container"]["mounts"].append(f"{dest}:{dest}:ro")
    proc = _apply(tmp_path, yaml.safe_dump(book), podman_env)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    cell = _cell(tmp_path)
    assert stale not in _run(["podman", "ps", "--format", "{{.Names}}"], podman_env).split()
    assert stale in (cell / "cell.json").read_text()  # the preflight says what it stopped
    server = json.loads((cell / "server.json").read_text())
    record = server["container"]
    assert record["image"] == tag and record["digest"] == digest
    assert record["run_ref"].endswith("@" + digest)
    assert record["image_id"] == record["running_image_id"]
    assert record["runtime_version"]
    assert server["argv"][:2] == ["podman", "run"]
    checked = json.loads((cell / "env_check.json").read_text())
    assert checked["ok"]
    inside = [p for p in checked["processes"] if "orchestrator.sim" in p["cmdline"]]
    # The server and its two TP workers: every process inside the container was read.
    assert len([p for p in inside if "worker" in p["cmdline"]]) == 2, checked["processes"]
    assert any(
        p["cmdline"].startswith(("/run/podman-init", "catatonit")) for p in checked["processes"]
    )
    for p in inside:
        assert p["vars"]["ORCH_SIM_SEED"]["ok"] and p["vars"]["NCCL_ALGO"]["ok"]
    names = _run(["podman", "ps", "-a", "--format", "{{.Names}}"], podman_env).split()
    assert record["name"] not in names
    # What the image holds, read inside the running container beside the host's snapshot.
    image = json.loads((cell / "snapshot.image.json").read_text())
    assert image["digest"] == digest
    assert image["labels"] == {"org.opencontainers.image.version": "v1"}
    assert image["runtime_version"] == record["runtime_version"]
    inside = image["inside"]
    assert inside["python"] == sys.version.split()[0]
    assert inside["executable"].startswith(sys.prefix)  # the server's own interpreter
    assert any(line.lower().startswith("pyyaml==") for line in inside["freeze"]), inside
    assert "orch-sim-kernels==1.0" in inside["freeze"]  # the image's own package
    # Neither torch nor the engine is in the simulator's venv: each says why, the cell passed.
    assert "torch" not in inside["versions"] and "torch" in inside["version_errors"]
    assert "No module named 'sglang'" in inside["version_errors"]["sglang"]
    assert record["inside"] == inside
    # The host's freeze would be taken for the server's: the host snapshot has none.
    host = json.loads((cell / "snapshot.pre.json").read_text())
    assert "disabled" in host["pip_freeze"]["absent"], host["pip_freeze"]
    # Both pins checked: the checkout's commit on the host, its model read inside the image.
    assert json.loads((cell / "repo.json").read_text())["sha"] == repo.shas[-1]
    pinned_model = subprocess.run(
        ["git", "-C", str(repo.path), "show", "bad:orch_sim_model.json"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert hashlib.sha256(pinned_model).hexdigest() in (cell / "server.log").read_text()
    # The bench ran in the pinned image, its results written through its mounted folder.
    ran = json.loads((cell / "bench" / "1" / "exit.json").read_text())
    assert ran["rc"] == 0 and ran["container"]["digest"] == digest, ran
    bench_argv = ran["container"]["argv"]
    assert bench_argv[:2] == ["podman", "run"] and bench_argv[-len(ran["argv"]) :] == ran["argv"]
    assert f"{tag.rsplit(':', 1)[0]}@{digest}" in bench_argv
    assert bench_argv[bench_argv.index("--workdir") + 1].endswith("/bench/1")
    assert ran["result_file_present"] is True  # written inside, read on the host


def test_a_sigkilled_runner_leaves_no_container_running(
    podman_env: dict[str, str],
    sim_tags: dict[str, str],
    tmp_path: Path,
) -> None:
    tag = sim_tags["v1"]
    text = _playbook(tag, podman_env["CONTAINERS_CONF"], _free_port(), 200, bench_in_image=True)
    proc = _apply(tmp_path, text, podman_env)
    listing = ["podman", "ps", "--filter", "label=orch.cell", "--format",
               '{{.Names}} {{index .Labels "orch.runner-pid"}}']  # fmt: skip
    names: set[str] = set()
    runner = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not any("-bench-" in n for n in names):
        for line in _run(listing, podman_env).splitlines():
            words = line.split()
            if "contained" in words[0]:  # the server's and a bench run's
                names.add(words[0])
                runner = int(words[1])
        time.sleep(0.3)
    try:
        assert any("-bench-" in n for n in names), f"no bench container ran: {names}"
        os.kill(runner, signal.SIGKILL)  # mid-bench: a bench run's container is up
        deadline = time.monotonic() + 30
        left = set(names)
        while time.monotonic() < deadline and left:
            time.sleep(1)
            running = _run(listing, podman_env)
            left = {n for n in running.split() if "contained" in n}
        assert not left, f"containers outlived their SIGKILLed runner by 30 s: {left}"
    finally:
        proc.kill()
        proc.communicate(timeout=60)
        for name in names:
            subprocess.run(["podman", "rm", "-f", name], env=podman_env, capture_output=True)


def test_a_pull_that_fails_fails_the_cell_with_its_reason(
    podman_env: dict[str, str],
    sim_tags: dict[str, str],
    tmp_path: Path,
) -> None:
    tag = sim_tags["v1"]
    missing = tag.rsplit(":", 1)[0] + "@sha256:" + "0" * 64  # a digest the registry lacks
    text = _playbook(missing, podman_env["CONTAINERS_CONF"], _free_port(), 1)
    proc = _apply(tmp_path, text, podman_env)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode != 0, out
    info = json.loads((_cell(tmp_path) / "cell.json").read_text())
    assert info["status"] == "failed" and info["failed_step"] == "server_start", info
    assert "pulling" in info["reason"] and "0000000000" in info["reason"]


def test_a_slurm_runtime_is_refused_outside_slurm_with_the_reason(tmp_path: Path) -> None:
    image = "reg.example/sim@sha256:" + "ab" * 32  # pinned as written: no registry asked
    text = _playbook(image, "/nonexistent", _free_port(), 1)
    data = yaml.safe_load(text)
    data["server"]["container"] = {"image": image, "runtime": "pyxis"}
    proc = _apply(tmp_path, yaml.safe_dump(data), dict(os.environ))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    info = json.loads((_cell(tmp_path) / "cell.json").read_text())
    assert info["failed_step"] == "server_start", info
    assert "pyxis runs only inside a Slurm job" in info["reason"]


def test_a_tag_moved_between_plan_and_run_is_caught_and_the_pin_still_runs(
    podman_env: dict[str, str],
    sim_tags: dict[str, str],
    tmp_path: Path,
) -> None:
    import socket

    tag = sim_tags["v1"]
    port = _free_port()
    text = _playbook(tag, podman_env["CONTAINERS_CONF"], port, 1)
    pinned = digest_of(tag, podman_env)
    with socket.socket() as held:  # the first start fails at preflight: its port is taken
        held.bind(("127.0.0.1", port))
        held.listen()
        out, _ = _apply(tmp_path, text, podman_env).communicate(timeout=240)
    (run,) = [p for p in (tmp_path / "results").iterdir() if (p / "run.json").exists()]
    assert json.loads((_cell(tmp_path) / "cell.json").read_text())["status"] == "failed", out
    # Between the plan and the retry the tag moves to another image (v2's).
    _run(["skopeo", "copy", "--src-tls-verify=false", "--dest-tls-verify=false",
          f"docker://{sim_tags['v2']}", f"docker://{tag}"], podman_env)  # fmt: skip
    moved = digest_of(tag, podman_env)
    assert moved != pinned
    proc = _apply(tmp_path, text, podman_env, "--resume", run.name, "--retry-failed")
    out, _ = proc.communicate(timeout=240)
    try:
        assert proc.returncode == 0, out
        record = json.loads((_cell(tmp_path) / "server.json").read_text())["container"]
        assert record["digest"] == pinned and record["tag_moved_to"] == moved
        assert f"now names {moved}" in out  # said on the terminal
    finally:
        back = f"docker://{tag.rsplit(':', 1)[0]}@{pinned}"  # the tag back, for the others
        _run(["skopeo", "copy", "--src-tls-verify=false", "--dest-tls-verify=false",
              back, f"docker://{tag}"], podman_env)  # fmt: skip
