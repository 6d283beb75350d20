"""Every file and folder name of a result bundle, in one place (docs/ARCHITECTURE.md, "The
result bundle"). The writer, the reader and every analysis take their names from here.

    <run-id>/
      run.json  plan.json  inventory.json  bisect.json  MANIFEST.sha256
      investigation.{json,md,html}   orch investigate's document and report
      playbook/...            the playbook files as given (secrets redacted)
      hosts/<host>/facts.json
      retried/<cell-id>.<n>/  a failed cell's earlier attempt, set aside by --retry-failed
      cells/<cell-id>/        one cell as the runner left it, plus the controller's verdict:
        cell.json  metrics.json  repo.json  server.json  env_check.json
        snapshot.pre.json  snapshot.post.json  events.jsonl  server.log  setup.log
        captures/<name>.<moment>.json   bench/<n>/ and bench/warmup-<n>/ (stdout, stderr, exit.json)
"""

from __future__ import annotations

import re
from typing import TypeGuard

from orchestrator.runner.layout import BENCH_DIR as BENCH_DIR
from orchestrator.runner.layout import BETWEEN_LOG as BETWEEN_LOG
from orchestrator.runner.layout import CAPTURES_DIR as CAPTURES_DIR
from orchestrator.runner.layout import CELL_JSON as CELL_JSON
from orchestrator.runner.layout import ENGINE_METRICS_JSONL as ENGINE_METRICS_JSONL
from orchestrator.runner.layout import ENV_CHECK_JSON as ENV_CHECK_JSON
from orchestrator.runner.layout import EVENTS as EVENTS
from orchestrator.runner.layout import EXIT_JSON as EXIT_JSON
from orchestrator.runner.layout import LINKS_FILE as LINKS_FILE
from orchestrator.runner.layout import METRICS_JSON as METRICS_JSON
from orchestrator.runner.layout import NODES_DIR as NODES_DIR
from orchestrator.runner.layout import NODES_JSON as NODES_JSON
from orchestrator.runner.layout import OUTPUTS_JSON as OUTPUTS_JSON
from orchestrator.runner.layout import PROFILE_DIR as PROFILE_DIR
from orchestrator.runner.layout import PROFILE_JSON as PROFILE_JSON
from orchestrator.runner.layout import REPEATS_JSON as REPEATS_JSON
from orchestrator.runner.layout import REPO_JSON as REPO_JSON
from orchestrator.runner.layout import SERVER_JSON as SERVER_JSON
from orchestrator.runner.layout import SERVER_LOG as SERVER_LOG
from orchestrator.runner.layout import SETUP_LOG as SETUP_LOG
from orchestrator.runner.layout import SNAPSHOT_IMAGE as SNAPSHOT_IMAGE
from orchestrator.runner.layout import SNAPSHOT_POST as SNAPSHOT_POST
from orchestrator.runner.layout import SNAPSHOT_PRE as SNAPSHOT_PRE
from orchestrator.runner.layout import STDERR as STDERR
from orchestrator.runner.layout import STDOUT as STDOUT
from orchestrator.runner.layout import TELEMETRY_CSV as TELEMETRY_CSV
from orchestrator.runner.layout import TELEMETRY_JSON as TELEMETRY_JSON

# The newest bundle layout this orch writes and reads; run.json and cell.json carry it.
SCHEMA_VERSION = 1

# run level
RUN_JSON = "run.json"
PLAN_JSON = "plan.json"
INVENTORY_JSON = "inventory.json"
BISECT_JSON = "bisect.json"
# `orch investigate`: its document and its report, beside the experiments' cells
INVESTIGATION_JSON = "investigation.json"
INVESTIGATION_MD = "investigation.md"
INVESTIGATION_HTML = "investigation.html"  # the same report, one self-contained page
MANIFEST = "MANIFEST.sha256"
PLAYBOOK_DIR = "playbook"
HOSTS_DIR = "hosts"
FACTS_JSON = "facts.json"  # hosts/<host>/facts.json
CELLS_DIR = "cells"
RETRIED_DIR = "retried"  # retried/<cell-id>.<n>/: a failed attempt `--retry-failed` ran again
# held by the run's live controller; a `.tmp` name, so the manifest and `orch pack` skip it
RUN_LOCK = ".controller.lock.tmp"

# cell level: the runner writes the cell folder, so its names are orchestrator/runner/layout.py's,
# re-exported above; these two are the controller's own
LOGS = (SERVER_LOG, SETUP_LOG, EVENTS)  # the full logs `orch show` points at
REPEAT_DIR = re.compile(r"^(warmup-)?(\d+)$")  # bench/<n>/ measured, bench/warmup-<n>/ warmup

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")  # a packed run


def is_archive_name(name: str) -> bool:
    """True for a packed run's file name (`<run-id>.tar.gz` or `.tgz`)."""
    return name.endswith(ARCHIVE_SUFFIXES)


def is_node_folder_name(name: object) -> TypeGuard[str]:
    """A name `nodes/<name>/` may take: one plain folder inside the cell's (not empty, no path
    separator, not hidden, not `..`), whoever wrote it (nodes.json, a Slurm node's snapshot)."""
    return (
        isinstance(name, str)
        and bool(name)
        and not name.startswith(".")
        and "/" not in name
        and "\\" not in name
    )


def is_tmp(name: str) -> bool:
    """`.<name>.tmp`: a file or cell being written (or left by an interrupted write)."""
    return name.startswith(".") and name.endswith(".tmp")


def in_progress(name: str) -> bool:
    """`.<id>.tmp` (a bundle's cell being installed) or `.<id>.partial` (a host's cell running)."""
    return name.startswith(".") and name.endswith((".tmp", ".partial"))
