"""`orch sim images`: two container images of the simulator (v1 and v2) for a study over
images, pushed to a registry. Each image is a scratch root that mounts the host's Python, this
venv and this checkout read-only (nothing to download), and holds what differs between the two
versions inside the image itself: the simulator's performance model (v2 decodes slower) and a
small package on the image's PYTHONPATH (`orch-sim-kernels`, 1.0 in v1 and 1.1 in v2).

The root filesystems are cached (`~/.cache/orch/images` by default, keyed by what they hold);
importing and pushing them takes a second each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.sim import model as m

ROOT = Path(__file__).resolve().parents[2]
TOP_DIRS = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")
MODEL_PATH = "/opt/orch-sim/orch_sim_model.json"  # inside the image
SITE = "/opt/orch-sim/site"  # the image's own packages, on its PYTHONPATH
PACKAGE = "orch-sim-kernels"
# version -> (decode slowdown, the package's version): what changes inside the image
VERSIONS: dict[str, tuple[float, str]] = {
    "v1": (1.0, "1.0"),
    "v1.1": (1.0, "1.0.1"),  # a release that changes the package, not the speed
    "v2": (1.5, "1.1"),
    "v2.1": (1.5, "1.1.1"),  # a third slower: found under a loaded machine too
}
STUDY = ("v1", "v2")  # the two-image study's; `orch bisect --images` takes all four
REPOSITORY = "orch/sim"


def host_mounts(paths: Sequence[str] | None = None) -> list[str]:
    """The host paths a scratch image mounts read-only: /usr, the top-level library folders
    that are not links into /usr, and `paths` (default: the interpreter, this venv and this
    checkout), each once."""
    out = ["/usr"]
    for name in TOP_DIRS:
        host = Path("/") / name
        if host.is_dir() and not host.is_symlink():
            out.append(str(host))
    wanted = (sys.base_prefix, sys.prefix, str(ROOT)) if paths is None else paths
    for path in wanted:
        if not any(path == p or path.startswith(p + "/") for p in out):
            out.append(path)
    return out


def scratch_root(root: Path, mounts: Sequence[str]) -> None:
    """A root with nothing of its own: /etc, /tmp, the host's merged-/usr links and a mount
    point for each of `mounts` (host paths mounted at the same place)."""
    (root / "etc").mkdir(parents=True)
    (root / "tmp").mkdir()
    for name in TOP_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            (root / name).symlink_to(os.readlink(host))  # merged /usr: the link is enough
    for path in mounts:
        (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)


def write_rootfs(root: Path, version: str) -> None:
    """The scratch root of image `version`: links and mount points for the host's paths, the
    performance model and the package that make this version what it is."""
    slowdown, package_version = VERSIONS[version]
    scratch_root(root, host_mounts())
    (root / "etc" / "orch-image").write_text(f"sim {version}\n")
    params = m.model_params()
    params["decode_ms"] = round(float(params["decode_ms"]) * slowdown, 3)
    model_file = root / MODEL_PATH.lstrip("/")
    model_file.parent.mkdir(parents=True)
    model_file.write_text(m.dump_params(params))
    info = root / SITE.lstrip("/") / f"{PACKAGE.replace('-', '_')}-{package_version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {package_version}\n"
    )


def _cache_key() -> str:
    """What the root filesystems depend on: this module, the host's paths and the model."""
    text = json.dumps([Path(__file__).read_text(), host_mounts(), m.dump_params(m.model_params())])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def rootfs_tar(cache: Path, version: str) -> Path:
    """The tar of image `version`'s root, built once per cache key."""
    folder = cache / _cache_key()
    tar = folder / f"sim-{version}.tar"
    if tar.exists():
        return tar
    root = folder / f"rootfs-{version}"
    subprocess.run(["rm", "-rf", str(root)], check=True)
    write_rootfs(root, version)
    partial = tar.with_suffix(".part")
    subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
    partial.rename(tar)
    return tar


def _run(argv: list[str], env: Mapping[str, str]) -> str:
    done = subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (rc {done.returncode}): {done.stderr}")
    return done.stdout


def push_images(
    registry: str, cache: Path, env: Mapping[str, str], versions: Sequence[str] = STUDY
) -> dict[str, str]:
    """Import each of `versions`' root as `REGISTRY/orch/sim:VERSION`, push it (plain http)
    and drop the local copy, so that a run pulls it by digest: version -> tag."""
    tags: dict[str, str] = {}
    for version in versions:
        tag = f"{registry}/{REPOSITORY}:{version}"
        changes = [f"ENV PYTHONPATH={SITE}", f"LABEL org.opencontainers.image.version={version}"]
        push_tar(rootfs_tar(cache, version), tag, env, changes)
        tags[version] = tag
    return tags


def push_tar(tar: Path, tag: str, env: Mapping[str, str], changes: Sequence[str] = ()) -> None:
    """Import a root's tar as `tag` (with Dockerfile-like `changes`), push it to its plain-http
    registry and drop the local copy, so that a run pulls it by digest."""
    flags = [a for c in changes for a in ("--change", c)]
    _run(["podman", "import", "-q", *flags, str(tar), tag], env)
    _run(["podman", "push", "-q", "--tls-verify=false", tag], env)
    _run(["podman", "rmi", "-f", tag], env)


def study_playbook(
    tags: Mapping[str, str],
    conf: str,
    port: int,
    *,
    repeats: int = 3,
    prompts: int = 8,
    concurrency: int = 2,
    name: str = "images",
    bench_in_image: bool = False,
) -> dict[str, Any]:
    """A study over the images (`matrix.image`): the simulator's server in each image, its
    performance model the one inside the image, the bench on the host (or, with
    `bench_in_image`, in the server's image: `bench.container` the same section)."""
    container = {
        "image": "{{ matrix.image }}",
        "tls_verify": False,
        "conf": conf,
        "network": "host",
        "mounts": [f"{p}:{p}:ro" for p in host_mounts()],
    }
    bench: dict[str, Any] = {
        "adapter": "sglang.bench_serving",
        "launcher": ["{{ orch_python }}", "-m", "orchestrator.sim", "bench"],
        "args": {
            "dataset-name": "random-ids",
            "random-input-len": 64,
            "random-output-len": 64,
            "num-prompts": prompts,
            "max-concurrency": concurrency,
        },
        "repeats": repeats,
    }
    if bench_in_image:
        bench["container"] = dict(container)
    return {
        "name": name,
        "vars": {"port": port},
        "matrix": {"image": list(tags.values())},
        "env": {"ORCH_SIM_TIME_SCALE": "0.02", "ORCH_SIM_SEED": "7", "NCCL_ALGO": "Ring"},
        "server": {
            "adapter": "sglang",
            "launcher": ["{{ orch_python }}", "-m", "orchestrator.sim", "serve"],
            "args": {
                "model-path": "/models/sim",
                "sim-model": MODEL_PATH,
                "host": "127.0.0.1",
                "port": "{{ port }}",
                "tp-size": 2,
            },
            "ready": {"timeout": 60},
            "stop_grace": 3,
            "container": container,
        },
        "bench": bench,
        "snapshot": {"topo": False},
        "timeouts": {"cell": 300},
    }


def main(argv: list[str]) -> int:
    """`orch sim images --registry HOST:PORT [--cache DIR] [--playbook FILE --conf C --port P]`:
    build (cached), push, print the tags as JSON; with --playbook, write the study too."""
    p = argparse.ArgumentParser(prog="orch sim images", description=__doc__)
    p.add_argument("--registry", required=True, help="HOST:PORT of a plain-http registry")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "orch" / "images"))
    p.add_argument("--playbook", help="write the two-image study here")
    p.add_argument("--conf", default=os.environ.get("CONTAINERS_CONF", ""))
    p.add_argument("--port", type=int, default=30123)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--versions",
        default=",".join(STUDY),
        help=f"which images, comma-separated, of {', '.join(VERSIONS)}",
    )
    args = p.parse_args(argv)
    versions = [v for v in args.versions.split(",") if v]
    unknown = [v for v in versions if v not in VERSIONS]
    if unknown:
        p.error(f"--versions: no image {', '.join(unknown)} (there are {', '.join(VERSIONS)})")
    tags = push_images(args.registry, Path(args.cache), os.environ, versions)
    if args.playbook:
        import yaml

        book = study_playbook(tags, args.conf, args.port, repeats=args.repeats)
        Path(args.playbook).write_text(yaml.safe_dump(book, sort_keys=False))
    print(json.dumps(tags))
    return 0
