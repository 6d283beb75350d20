"""The container tier's session fixtures (tests/container/podman_parts.py): one Podman
environment, one registry and one push of the simulator's images for every module."""

from container.podman_parts import images, podman_env, registry, sim_tags  # noqa: F401
