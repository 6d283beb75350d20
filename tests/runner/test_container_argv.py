"""Image references and container command lines, checked against each runtime's documented flags.

The flags: podman-run(1) and docker run (--volume, --device CDI names, --gpus '"device=.."'),
pyxis's spank options (args.c: --container-image/-mounts/-workdir/-env, --no-container-mount-home),
enroot's import/create/start usage (doc/cmd/*.md), apptainer's action flags (--cleanenv, --nv,
--bind, --pwd). Where they are recorded: docs/FACTS.md, "Containers".
"""

from __future__ import annotations

import pytest

from orchestrator.runner.container import (
    ContainerSpec,
    ContainerSpecError,
    Mount,
    apptainer_env,
    apptainer_exec,
    engine_container_image,
    engine_image_id,
    engine_orphans,
    engine_run,
    enroot_commands,
    labels,
    pyxis_flags,
    same_image_id,
)
from orchestrator.runner.image import ImageRef, ImageRefError, parse_image

HEX = "a" * 64
DIGEST = f"sha256:{HEX}"


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("ubuntu", "", "ubuntu", "", ""),
        ("lmsysorg/sglang:v0.5.4-cu129", "", "lmsysorg/sglang", "v0.5.4-cu129", ""),
        ("docker.io/library/ubuntu:24.04", "", "ubuntu", "24.04", ""),
        ("nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io", "nvidia/pytorch", "25.01-py3", ""),
        ("localhost:5000/orch/sim:v1", "localhost:5000", "orch/sim", "v1", ""),
        ("127.0.0.1:5000/sim@" + DIGEST, "127.0.0.1:5000", "sim", "", DIGEST),
        ("vllm/vllm-openai:v0.11.0@" + DIGEST, "", "vllm/vllm-openai", "v0.11.0", DIGEST),
    ],
)
def test_parse_image(text: str, registry: str, repository: str, tag: str, digest: str) -> None:
    ref = parse_image(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("Ubuntu:24.04", "not a repository name"),
        ("ubuntu:bad tag", "white space"),
        ("ubuntu@sha256:1234", "64 lower-case hex"),
        ("ubuntu:-x", "not a valid tag"),
        ("reg.io//x", "not a repository name"),
    ],
)
def test_bad_references_say_which_part(text: str, says: str) -> None:
    with pytest.raises(ImageRefError, match=says):
        parse_image(text)


def test_a_pinned_reference_runs_by_digest_only() -> None:
    ref = parse_image("localhost:5000/orch/sim:v1").with_digest(DIGEST)
    assert ref.pinned
    assert ref.run_ref() == f"localhost:5000/orch/sim@{DIGEST}"
    assert ref.text() == f"localhost:5000/orch/sim:v1@{DIGEST}"
    with pytest.raises(ImageRefError):
        ref.with_digest("sha256:nothex")


def test_enroot_spelling_uses_hash_and_reads_the_digest_as_a_tag() -> None:
    assert parse_image("nvcr.io/nvidia/pytorch:25.01-py3").enroot_ref() == (
        "nvcr.io#nvidia/pytorch:25.01-py3"
    )
    assert parse_image("ubuntu").enroot_ref() == "registry-1.docker.io#library/ubuntu:latest"
    pinned = parse_image("lmsysorg/sglang:v0.5.4").with_digest(DIGEST)
    assert pinned.enroot_ref() == f"registry-1.docker.io#lmsysorg/sglang:{DIGEST}"


def _spec(runtime: str = "podman", **kw: object) -> ContainerSpec:
    image = ImageRef(repository="orch/sim", registry="localhost:5000", tag="v1", digest=DIGEST)
    mounts = (Mount.parse("/models:/models:ro"), Mount.parse("/root/sglang:/sgl-workspace"))
    return ContainerSpec(image=image, runtime=runtime, mounts=mounts, **kw)  # type: ignore[arg-type]


def test_podman_run_names_env_but_never_its_values() -> None:
    argv = engine_run(
        _spec(gpus="all", shm_size="32g", ipc="host", network="host"),
        ["python", "-m", "sglang.launch_server", "--port", "30000"],
        name="orch-cell-1",
        env_names=["NCCL_ALGO", "HF_TOKEN"],
        label_map=labels("run1", "cell-1", 4242),
    )
    assert argv[:6] == ["podman", "run", "--rm", "--init", "--name", "orch-cell-1"]

    def after(flag_value: str) -> str:
        return argv[argv.index(flag_value) - 1]

    assert after("orch.runner-pid=4242") == "--label"
    assert after("/models:/models:ro") == "--volume"
    assert after("/root/sglang:/sgl-workspace") == "--volume"
    assert after("nvidia.com/gpu=all") == "--device"
    assert argv[argv.index("--shm-size") + 1] == "32g"
    assert argv[argv.index("--network") + 1] == "host"
    assert [a for i, a in enumerate(argv) if a == "--env" or (i and argv[i - 1] == "--env")] == [
        "--env",
        "HF_TOKEN",
        "--env",
        "NCCL_ALGO",
    ]
    image_at = argv.index(f"localhost:5000/orch/sim@{DIGEST}")
    assert argv[image_at + 1 :] == ["python", "-m", "sglang.launch_server", "--port", "30000"]


def test_docker_gpu_lists_are_one_quoted_csv_field() -> None:
    argv = engine_run(_spec("docker", gpus="0,1"), ["x"], name="n", env_names=[], label_map={})
    assert argv[argv.index("--gpus") + 1] == '"device=0,1"'
    podman = engine_run(_spec(gpus="0,1"), ["x"], name="n", env_names=[], label_map={})
    assert [a for a in podman if a.startswith("nvidia.com/gpu=")] == [
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=1",
    ]


def test_pyxis_flags_as_the_spank_plugin_reads_them() -> None:
    flags = pyxis_flags(_spec("pyxis", workdir="/sgl-workspace"), ["NCCL_ALGO", "CUDA_HOME"])
    assert flags == [
        f"--container-image=localhost:5000#orch/sim:{DIGEST}",
        "--container-mounts=/models:/models:ro,/root/sglang:/sgl-workspace",
        "--container-workdir=/sgl-workspace",
        "--no-container-mount-home",
        "--container-env=CUDA_HOME,NCCL_ALGO",
    ]


def test_enroot_import_create_start() -> None:
    steps = enroot_commands(
        _spec("enroot"), ["sh", "-c", "true"], name="c1", image_file="/t/i.sqsh"
    )
    assert steps[0] == [
        "enroot",
        "import",
        "--output",
        "/t/i.sqsh",
        f"docker://localhost:5000#orch/sim:{DIGEST}",
    ]
    assert steps[1] == ["enroot", "create", "--force", "--name", "c1", "/t/i.sqsh"]
    assert steps[2][:2] == ["enroot", "start"] and steps[2][-4:] == ["c1", "sh", "-c", "true"]
    assert "/models:/models:ro" in steps[2]


def test_apptainer_clean_env_and_gpus() -> None:
    argv = apptainer_exec(_spec("apptainer", gpus="all", workdir="/w"), ["python", "-V"])
    assert argv[:4] == ["apptainer", "exec", "--cleanenv", "--nv"]
    assert argv[argv.index("--pwd") + 1] == "/w"
    assert argv[-3:] == [f"docker://localhost:5000/orch/sim@{DIGEST}", "python", "-V"]
    assert apptainer_env({"NCCL_ALGO": "Ring"}) == {"APPTAINERENV_NCCL_ALGO": "Ring"}


@pytest.mark.parametrize(
    ("spec_kw", "says"),
    [
        ({"runtime": "lxc"}, "unknown container runtime"),
        ({"runtime": "podman", "gpus": "first"}, "device indices"),
        ({"runtime": "apptainer", "shm_size": "8g"}, "options of podman and docker"),
    ],
)
def test_settings_a_runtime_cannot_honour(spec_kw: dict[str, str], says: str) -> None:
    runtime = spec_kw.pop("runtime")
    with pytest.raises(ContainerSpecError, match=says):
        _spec(runtime, **spec_kw).check()


@pytest.mark.parametrize("text", ["models:/m", "/m:/n:rx", "/m::ro", "/a:/b:ro:x"])
def test_bad_mounts(text: str) -> None:
    with pytest.raises(ContainerSpecError):
        Mount.parse(text)


def test_inspect_and_orphan_lines() -> None:
    assert engine_container_image("podman", "c")[-2:] == ["{{.Image}}", "c"]
    assert engine_image_id("docker", "x@" + DIGEST)[-2:] == ["{{.Id}}", "x@" + DIGEST]
    assert "label=orch.runner-pid" in engine_orphans("docker")
    with pytest.raises(ContainerSpecError):
        engine_container_image("pyxis", "c")


def test_image_ids_compare_across_runtimes() -> None:
    assert same_image_id("sha256:" + HEX, HEX + "\n")
    assert not same_image_id("", "")
    assert not same_image_id(HEX, "b" * 64)
