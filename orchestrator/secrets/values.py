"""Which values a run must keep secret, from every source a value can come from: the controller
hands them to the runner (redaction by value in every file) and scrubs them from its own writes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.cell import Cell
from orchestrator.config.host import Inventory
from orchestrator.config.playbook import parse_extra_vars
from orchestrator.errors import OrchError
from orchestrator.secrets.redact import (
    redact_text,
    redact_yaml_text,
    secret_names_of,
    secret_values_in,
    yaml_documents,
)
from orchestrator.secrets.rule import MIN_VALUE_LENGTH, is_secret_name


def secret_values(
    cells: Sequence[Cell], *var_sources: Mapping[str, Any], files: Sequence[Path] = ()
) -> list[str]:
    """Every secret value we know of: env values and vars that are secret by name or listed.

    `var_sources` are mappings of variables: the playbook's vars, -e values, each host's
    inventory vars; a value under a secret name counts at any depth (`{"db": {"password": x}}`),
    as do the cells' server and bench args (`api-key`). `files` are the playbook's files as
    written: their values under secret names count too, those a later layer (`-e`, a
    `vars_files` file, the extending playbook) overrode included. A var listed under `secrets:`
    is in every cell's `secrets` even when its name looks harmless.
    """
    values: set[str] = set()
    listed: set[str] = set()
    for cell in cells:
        listed.update(cell.secrets)
        for env in (cell.env, *(part.env for part in cell.nodes)):  # each node's own values
            for name, value in env.items():
                if is_secret_name(name, cell.secrets):
                    values.add(value)
        for name, value in cell.axes.items():  # a matrix axis of secrets (api_key: [a, b])
            if is_secret_name(name, cell.secrets):
                values.update(secret_values_in({name: value}, listed | set(cell.secrets)))
    texts: list[str] = []
    for path in files:
        try:
            texts.append(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue  # the by-value sweep and the copy's own redaction still apply
    # A variable a secret's template reads is secret too (`tok` of "Bearer {{ tok }}"),
    # wherever it is defined: a playbook file, a vars file, -e or the inventory.
    documents = [d for text in texts for d in yaml_documents(text)]
    listed = set(secret_names_of([*documents, *var_sources], listed))
    for cell in cells:
        for section in (cell.server, cell.bench):
            if section is not None:
                values.update(secret_values_in(section.args, listed))
    for source in var_sources:
        values.update(secret_values_in(source, listed))
    for text in texts:
        values.update(redact_yaml_text(text, listed)[1])
    # Short values would shred unrelated text; they are still never written in JSON fields.
    return sorted(v for v in values if len(v) >= MIN_VALUE_LENGTH)


def secrets_of_run(
    cells: Sequence[Cell],
    inventory: Inventory,
    *var_sources: Mapping[str, Any],
    files: Sequence[Path] = (),
) -> list[str]:
    """`secret_values` of a run of `cells`, the variables of the hosts they use included."""
    used = {name for c in cells for name in c.hosts}
    hosts = [h for name, h in inventory.hosts.items() if name in used]
    found = secret_values(cells, *var_sources, *(h.vars for h in hosts), files=files)
    options = [o for h in hosts if h.slurm is not None for o in h.slurm.extra]
    return sorted({*found, *assigned_secrets(options)})


# NAME=VALUE inside an option (`--export=ALL,WANDB_API_KEY=x`, `--comment=HF_TOKEN=y`): found
# at every name start, so `comment=HF_TOKEN=y` also yields HF_TOKEN's own value
_ASSIGNED = re.compile(r"(?<![A-Za-z0-9_])(?=([A-Za-z_][A-Za-z0-9_]*)=([^,\s]+))")


def assigned_secrets(options: Sequence[str]) -> list[str]:
    """The values assigned to secret names inside command-line options (`slurm_extra`): they
    reach `orch plan`, and every snapshot through `scontrol show job`, as written."""
    values = {
        value
        for option in options
        for name, value in _ASSIGNED.findall(option)
        if is_secret_name(name) and len(value) >= MIN_VALUE_LENGTH
    }
    return sorted(values)


def extra_vars_in_argv(argv: Sequence[str]) -> list[dict[str, Any]]:
    """The mappings each `-e`/`--extra-vars` of a command line gives, overridden ones included.

    `-e hf_token=A -e hf_token=B` uses B, but argv (recorded in run.json) holds A too. An
    argument that does not parse gives nothing (the command line was checked before the run).
    """
    found: list[dict[str, Any]] = []
    items = list(argv)
    for i, arg in enumerate(items):
        if arg in ("-e", "--extra-vars"):
            value = items[i + 1] if i + 1 < len(items) else None
        elif arg.startswith("--extra-vars="):
            value = arg.partition("=")[2]
        elif arg.startswith("-e") and not arg.startswith("--") and len(arg) > 2:
            value = arg[2:]
        else:
            continue
        if value is None:
            continue
        try:
            found.append(parse_extra_vars([value]))
        except OrchError:
            continue
    return found


def scrub(data: Any, secrets: Sequence[str]) -> Any:
    """Replace secret values anywhere inside JSON-ready data."""
    if isinstance(data, str):
        return redact_text(data, secrets)
    if isinstance(data, list):
        return [scrub(v, secrets) for v in data]
    if isinstance(data, dict):
        return {k: scrub(v, secrets) for k, v in data.items()}
    return data
