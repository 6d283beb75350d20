"""Replaying from a bundle: secrets come back from the environment, or the replay is refused."""

from typing import Any

import pytest

from orchestrator.errors import InputError
from orchestrator.execute.replay import restore_secrets
from orchestrator.secrets.redact import REDACTED


def _recorded(**overrides: Any) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "id": "c-1",
        "playbook": "p",
        "host": "h",
        "axes": {},
        "env": {"HF_TOKEN": REDACTED, "PLAIN": "x"},
        "secrets": ["HF_TOKEN"],
        "bench": {"argv": ["true"]},
    }
    cell.update(overrides)
    return cell


def test_env_secret_comes_back_from_the_environment() -> None:
    cell = restore_secrets(_recorded(), {"HF_TOKEN": "hf_back"})
    assert cell.env == {"HF_TOKEN": "hf_back", "PLAIN": "x"}


def test_missing_env_secret_is_refused_by_name() -> None:
    with pytest.raises(InputError, match="HF_TOKEN"):
        restore_secrets(_recorded(), {})


def test_secret_inside_argv_is_refused_with_where() -> None:
    data = _recorded(bench={"argv": ["client", "--api-key", REDACTED]})
    with pytest.raises(InputError, match=r"bench\.argv\[2\]"):
        restore_secrets(data, {"HF_TOKEN": "hf_back"})
