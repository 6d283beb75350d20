"""Container image references: parsed once, pinned to a digest, spelled for each runtime.

A reference is `[REGISTRY/]REPOSITORY[:TAG][@sha256:HEX]`, as Docker and Podman write it. A
tag is a name that can move; the digest is what ran. orch resolves a tag to its digest at plan
time and pins the run to `REPOSITORY@sha256:HEX`, as it pins a repo ref to a full SHA.
Stdlib only: the runner ships this module to the hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# The distribution spec's grammar, in short: lower-case path components separated by / . _ -
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
# A first component is a registry when it holds a dot or a port, or is `localhost`.
_REGISTRY = re.compile(r"(?:localhost|[A-Za-z0-9.-]+\.[A-Za-z0-9.-]+|[A-Za-z0-9.-]+:\d+)(?::\d+)?")
DOCKER_HUB = "docker.io"


class ImageRefError(ValueError):
    """An image reference that no runtime would accept; the message says which part."""


@dataclass(frozen=True)
class ImageRef:
    """One image reference: `registry` is empty for Docker Hub's default."""

    repository: str
    registry: str = ""
    tag: str = ""
    digest: str = ""

    @property
    def pinned(self) -> bool:
        """True once the reference names a digest: what runs can no longer move."""
        return bool(self.digest)

    def with_digest(self, digest: str) -> ImageRef:
        """This reference pinned to `digest` (the tag kept for people to read)."""
        if not DIGEST.fullmatch(digest):
            raise ImageRefError(f"not a sha256 digest: {digest!r}")
        return replace(self, digest=digest)

    def name(self) -> str:
        """`registry/repository` (or the repository alone on Docker Hub)."""
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    def text(self) -> str:
        """The reference as written: `name[:tag][@digest]`."""
        out = self.name()
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out

    def run_ref(self) -> str:
        """What Podman, Docker and Apptainer are told to run: by digest once pinned.

        `name@digest` alone: with a tag beside it some runtimes check the tag, others ignore
        it, so a pinned run names the digest only.
        """
        return f"{self.name()}@{self.digest}" if self.digest else self.text()

    def enroot_ref(self) -> str:
        """The reference as enroot (and pyxis's `--container-image`) read it.

        Enroot separates the registry with `#` and, before 4.0, knows no `@digest`; its tag
        pattern admits `:`, so `IMAGE:sha256:HEX` asks the registry for the manifest by digest
        on every enroot version (the registry API takes a tag or a digest in one place).
        """
        registry = self.registry or "registry-1.docker.io"
        repository = self.repository
        if not self.registry and "/" not in repository:
            repository = f"library/{repository}"
        ref = self.digest or self.tag or "latest"
        return f"{registry}#{repository}:{ref}"


def parse_image(text: str) -> ImageRef:
    """Parse `[REGISTRY/]REPOSITORY[:TAG][@sha256:HEX]`; ImageRefError names the bad part."""
    if not isinstance(text, str) or not text.strip():
        raise ImageRefError("an image reference is empty")
    if text != text.strip() or any(c.isspace() for c in text):
        raise ImageRefError(f"an image reference holds white space: {text!r}")
    rest, digest = text, ""
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not DIGEST.fullmatch(digest):
            raise ImageRefError(
                f"{text!r}: the part after @ must be sha256: and 64 lower-case hex digits"
            )
    registry = ""
    first, _, remainder = rest.partition("/")
    if remainder and _REGISTRY.fullmatch(first):
        registry, rest = first, remainder
    tag = ""
    if ":" in rest:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise ImageRefError(f"{text!r}: {tag!r} is not a valid tag")
    if not _REPOSITORY.fullmatch(rest):
        raise ImageRefError(
            f"{text!r}: {rest!r} is not a repository name (lower-case letters, digits, . _ - /)"
        )
    if registry in {DOCKER_HUB, "index.docker.io", "registry-1.docker.io"}:
        registry = ""
        rest = rest[len("library/") :] if rest.startswith("library/") else rest
    return ImageRef(repository=rest, registry=registry, tag=tag, digest=digest)
