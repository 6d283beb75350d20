"""The benchmark clients GuideLLM and AIPerf, each in a venv of its own built once per machine
by scripts/clients.sh (scripts/test.sh runs it and exports ORCH_GUIDELLM_PYTHON and
ORCH_AIPERF_PYTHON).

Skipped, saying how to build them, where a client is not built; under CI (CI=true) that is a
failure, since CI must run them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .clients_helpers import client_python


@pytest.fixture(scope="session")
def guidellm_python() -> str:
    """GuideLLM's venv python."""
    return client_python("ORCH_GUIDELLM_PYTHON", "guidellm")


@pytest.fixture(scope="session")
def tiny_tokenizer() -> str:
    """The tiny Llama's folder (scripts/engine.sh), a real BPE tokenizer: GuideLLM's synthetic
    prompts are cut from a corpus by it (over a word-level vocabulary it sends nothing)."""
    model = os.environ.get("ORCH_ENGINE_MODEL", "")
    if not model or not Path(model).is_dir():
        why = "the tiny model is not built: export ORCH_ENGINE_MODEL as scripts/engine.sh prints"
        if os.environ.get("CI"):
            pytest.fail(why + "; CI must run the client tests")
        pytest.skip(why)
    return model


@pytest.fixture(scope="session")
def aiperf_python() -> str:
    """AIPerf's venv python."""
    return client_python("ORCH_AIPERF_PYTHON", "aiperf")
