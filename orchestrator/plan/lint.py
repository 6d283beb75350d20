"""What a plan is warned about without being refused: `orch validate`, `plan` and `apply` print
these on stderr and exit as they would without them.

- An `NCCL_*` name in `env:` that NCCL does not document (NCCL ignores it without a word), with
  the nearest documented name when there is one. Keys are located where they are written; a
  name that only a template gives is checked as each cell renders it.
- Secret values shorter than `MIN_SECRET_LENGTH`: redacted by name only (runner/redaction.py),
  so they stay visible inside logs. The names are listed, never the values.
- One check that does refuse (exit 2): an `expect:` name the bench adapter's metric catalogue
  does not have (`expect_name_error`), with the nearest known name; the generic adapter is
  open-ended and regex metrics under `bench.metrics` count as known.
- Cells sharing a vLLM server without VLLM_SERVER_DEV_MODE=1: vLLM refuses the cache reset
  between them, so each would run on the previous cell's warm prefix cache.
- A server with no `ready:` check (a note, not a warning): it counts as ready once it has
  stayed up `UNCHECKED_SETTLE_SECONDS`.
- A bench whose `args` pin the client's seed with `cache: fresh` (the default) and nothing to
  empty the cache between runs: every repeat sends the warm-up's prompts again, and the
  engine's prefix cache serves them (`bench.cache: warm` says that is meant).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.adapters import BENCH_ADAPTERS, unknown_metric_hint
from orchestrator.cell import Cell
from orchestrator.config.keypath import KeyPath
from orchestrator.config.loaded import LoadedPlaybook
from orchestrator.config.templates.render import has_template
from orchestrator.errors import InputError
from orchestrator.plan.outputs import OUTPUT_NAMES, output_expect_problem
from orchestrator.plan.sessions import session_key
from orchestrator.runner.redaction import MIN_SECRET_LENGTH, is_secret_name, short_secret_names
from orchestrator.runner.server import UNCHECKED_SETTLE_SECONDS
from orchestrator.sim.nccl_names import is_nccl_name, nearest_nccl_name


def plan_warnings(
    playbook: LoadedPlaybook, cells: Sequence[Cell], *var_sources: Mapping[str, Any]
) -> list[str]:
    """Every warning for this plan, each as one `warning: ...` line (see the module doc)."""
    found = nccl_name_warnings(playbook, cells)
    short = short_secret_warning(cells, *var_sources)
    if short is not None:
        found.append(short)
    refused = refused_reset_warning(playbook, cells)
    if refused is not None:
        found.append(refused)
    found += shared_address_warnings(cells)
    pinned = pinned_seed_warning(playbook, cells)
    if pinned is not None:
        found.append(pinned)
    return found


def pinned_seed_warning(playbook: LoadedPlaybook, cells: Sequence[Cell]) -> str | None:
    """A warning when cells that ask for a fresh cache pin their client's seed: each run then
    sends the same prompts, and nothing (`run_inputs`) empties the cache between runs."""
    pinned = []
    for cell in cells:
        adapter = BENCH_ADAPTERS[cell.bench.adapter]()
        if cell.bench.cache != "fresh" or adapter.seed_flag is None:
            continue
        if adapter.seed_arg in cell.bench.args and not (cell.run_inputs and cell.run_inputs.flags):
            pinned.append(cell)
    if not pinned:
        return None
    where = playbook.locate(("bench", "args", "seed"))
    return (
        f"warning: {where}: bench.args pins the client's seed for {len(pinned)} cell(s): every "
        "repeat sends the warm-up's prompts again, and the engine's prefix cache (on by default "
        "in SGLang and vLLM) serves them from what the runs before left (drop the seed, or set "
        "bench.cache: warm if a warm cache is what you measure)"
    )


def shared_address_warnings(cells: Sequence[Cell]) -> list[str]:
    """A warning per server over several hosts whose nodes share an address: two inventory
    names for one machine make a "2-node" server that runs on one (the SSH port aside)."""
    found: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for cell in cells:
        if not cell.nodes or cell.nodes[0].host == cell.host:  # a Slurm job: Slurm's nodes
            continue
        by_address: dict[str, list[str]] = {cell.nodes[0].head_address: [cell.host]}
        for node in cell.nodes:
            by_address.setdefault(node.address, []).append(node.host)
        for address, names in by_address.items():
            key = (address, *names)
            if len(names) > 1 and key not in seen:
                seen.add(key)
                found.append(
                    f"warning: hosts {', '.join(names)} form one server but all are {address}: "
                    "its nodes run on one machine (two inventory names for one address?)"
                )
    return found


def refused_reset_warning(playbook: LoadedPlaybook, cells: Sequence[Cell]) -> str | None:
    """A warning when cells will share a vLLM server whose cache reset it will refuse: vLLM
    serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1 (docs/FACTS.md), so each cell
    after the first would run on the one before's warm prefix cache."""
    sessions: dict[tuple[str, str], int] = {}
    for cell in cells:
        server = cell.server
        if server is None or server.adapter != "vllm" or cell.env.get("VLLM_SERVER_DEV_MODE"):
            continue
        key = (cell.host, session_key(cell))
        sessions[key] = sessions.get(key, 0) + 1
    shared = sum(1 for n in sessions.values() if n > 1)
    if not shared:
        return None
    return (
        f"warning: {playbook.locate(('server',))}: server: {shared} vLLM server session(s) "
        "are shared by several cells, but vLLM refuses /reset_prefix_cache without "
        "VLLM_SERVER_DEV_MODE=1: each cell after the first would run on a warm prefix cache "
        "(set VLLM_SERVER_DEV_MODE: 1 under env:, or server.restart: per_cell)"
    )


def nccl_name_warnings(playbook: LoadedPlaybook, cells: Sequence[Cell]) -> list[str]:
    """A located warning for each `NCCL_*` env name NCCL does not know, once per name."""
    plain, templated = _env_keys(playbook.data.get("env"))
    # A name only a template gives (`env: ["{{ extra_env }}"]`) is located at that template
    # when there is one, else at `env:`.
    rendered_at: KeyPath = templated[0] if len(templated) == 1 else ("env",)
    names = dict(plain)
    for cell in cells:
        for name in cell.env:
            names.setdefault(name, rendered_at)
    out = []
    for name, path in names.items():
        if not name.upper().startswith("NCCL_") or is_nccl_name(name):
            continue
        nearest = nearest_nccl_name(name)
        hint = f" (did you mean {nearest}?)" if nearest else ""
        out.append(
            f"warning: {playbook.locate(path)}: env.{name}: NCCL does not know this variable{hint}"
        )
    return out


def expect_name_error(playbook: LoadedPlaybook, cells: Sequence[Cell]) -> InputError | None:
    """The first `expect:` name some cell's bench adapter cannot report, located, or None."""
    written = playbook.data.get("expect")
    for cell in cells:
        for name, exp in cell.expect.items():
            # bench.fingerprint and bench.accuracy record these; `equal` is the fingerprint's
            if name in OUTPUT_NAMES or exp.equal is not None:
                found = output_expect_problem(cell.bench, name, exp.equal is not None)
                if found is None:
                    continue
                problem, hint = found
            elif cell.bench.adapter not in BENCH_ADAPTERS:
                continue
            else:
                unknown = unknown_metric_hint(cell.bench.adapter, name, cell.bench.metrics)
                if unknown is None:
                    continue
                problem, hint = f"{cell.bench.adapter} reports no metric {name!r}", unknown
            path: KeyPath = ("expect", name) if isinstance(written, Mapping) else ("expect",)
            if isinstance(written, Mapping) and name not in written:
                path = ("expect",)  # a name a template gave
            return InputError(
                problem,
                location=playbook.locate(path),
                key_path=f"expect.{name}",
                hint=hint,
            )
    return None


def short_secret_warning(cells: Sequence[Cell], *var_sources: Mapping[str, Any]) -> str | None:
    """One warning naming every secret whose value is too short to redact inside logs, or None.

    Secrets are the cells' secret env values and the top-level secret vars of `var_sources`
    (the playbook's vars, -e values, hosts' inventory vars). Values are never part of it.
    """
    short: set[str] = set()
    listed = {name for cell in cells for name in cell.secrets}
    for cell in cells:
        secret_env = {k: v for k, v in cell.env.items() if is_secret_name(k, cell.secrets)}
        short.update(short_secret_names(secret_env))
    for source in var_sources:
        secret_vars = {str(k): v for k, v in source.items() if is_secret_name(str(k), listed)}
        short.update(short_secret_names(secret_vars))
    if not short:
        return None
    return (
        f"warning: secret values of {', '.join(sorted(short))} are shorter than "
        f"{MIN_SECRET_LENGTH} characters: hidden where orch writes them by name, not inside logs"
    )


def unchecked_ready_note(playbook: LoadedPlaybook, cells: Sequence[Cell]) -> str | None:
    """A note when some cell's server declares no readiness check (no `ready.url`, no `log`)."""
    if not any(
        c.server is not None and not (c.server.ready.url or c.server.ready.log) for c in cells
    ):
        return None
    return (
        f"note: {playbook.locate(('server',))}: server: no readiness check is declared "
        f"(no server.ready url or log): the server counts as ready once it has stayed up "
        f"{UNCHECKED_SETTLE_SECONDS:g}s"
    )


def _env_keys(env: Any) -> tuple[dict[str, KeyPath], list[KeyPath]]:
    """The names written under `env:` (a mapping or a list of them) with their key paths, and
    the paths of templates that render to mappings of further names."""
    plain: dict[str, KeyPath] = {}
    templated: list[KeyPath] = []
    items = env if isinstance(env, list) else [env]
    for i, item in enumerate(items):
        base: KeyPath = ("env", i) if isinstance(env, list) else ("env",)
        if isinstance(item, Mapping):
            for key in item:
                plain.setdefault(str(key), (*base, key))
        elif isinstance(item, str) and has_template(item):
            templated.append(base)
    return plain, templated
