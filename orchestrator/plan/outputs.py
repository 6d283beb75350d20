"""`bench.fingerprint` and `bench.accuracy` as planned: checked, their server's base URL found
(the readiness check's host and the server's port, unless `url:` gives it)."""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.sections import server_url
from orchestrator.cell import BenchSpec, OutputsSpec, ServerSpec
from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.config.model import AccuracySection
from orchestrator.errors import InputError, SourceLocation

OUTPUT_KEYS = ("fingerprint", "accuracy")
OUTPUT_NAMES = OUTPUT_KEYS  # what `expect:` may name of their records


def outputs_spec(
    checked: AccuracySection | None,
    server: ServerSpec | None,
    path: KeyPath,
    location: SourceLocation | None,
) -> OutputsSpec | None:
    """The runner's spec of one output check, or None when it is off; a server without a URL
    to ask (no server, no port, no `url:`) is an input error at `path`."""
    if checked is None or not checked.enabled:
        return None
    url: Any = checked.url or server_url(server)
    if not url:
        raise InputError(
            f"{path[-1]} asks the server for completions, and this cell's server has no URL",
            location=location,
            key_path=format_key_path(path),
            hint="add a server: with a port, or give url: (e.g. http://127.0.0.1:8000)",
        )
    return OutputsSpec(
        url=str(url).rstrip("/"),
        prompts=checked.prompts,
        max_tokens=checked.max_tokens,
        timeout=float(checked.timeout),
        passes=getattr(checked, "passes", 1),
    )


def output_expect_problem(bench: BenchSpec, name: str, equal: bool) -> tuple[str, str] | None:
    """(problem, hint) of an `expect:` entry on what the output checks record, or None when it
    is fine: `fingerprint` needs `bench.fingerprint` and `equal:`, `accuracy` needs
    `bench.accuracy`, and `equal:` fits nothing else."""
    if name == "fingerprint":
        if bench.fingerprint is None:
            return "expect.fingerprint needs bench.fingerprint", "add bench.fingerprint: true"
        if not equal:
            return "expect.fingerprint takes equal:", "equal: the digest of a good run"
        return None
    if equal:
        return f"equal: applies to fingerprint, not {name!r}", "use min, max or ref"
    if name == "accuracy" and bench.accuracy is None:
        return "expect.accuracy needs bench.accuracy", "add bench.accuracy: true"
    return None
