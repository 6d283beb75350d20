"""The names of the files and folders of a cell's folder: shared by the runner, which writes
them, and, re-exported, by the controller's results/layout.py."""

from __future__ import annotations

CELL_JSON = "cell.json"
NODES_DIR = "nodes"  # a multi-node cell: each other node's own folder, nodes/<host>/
NODES_JSON = "nodes.json"  # a multi-node cell: what each other node did
METRICS_JSON = "metrics.json"
REPO_JSON = "repo.json"
SERVER_JSON = "server.json"
ENV_CHECK_JSON = "env_check.json"
SNAPSHOT_PRE = "snapshot.pre.json"
SNAPSHOT_POST = "snapshot.post.json"
SNAPSHOT_IMAGE = "snapshot.image.json"  # read inside a server's container (server.container)
EVENTS = "events.jsonl"
SERVER_LOG = "server.log"
SETUP_LOG = "setup.log"
CAPTURES_DIR = "captures"  # captures/<name>.<moment>.json
BENCH_DIR = "bench"  # bench/<n>/ measured, bench/warmup-<n>/ warmup
STDOUT = "stdout"
STDERR = "stderr"
EXIT_JSON = "exit.json"
TELEMETRY_CSV = "telemetry.csv"  # the GPU sampler's rows
TELEMETRY_JSON = "telemetry.json"  # the sampler's own account (rows, off, errors)
ENGINE_METRICS_JSONL = "engine_metrics.jsonl"  # bench/<n>/: the engine's /metrics, sampled
LINKS_FILE = "links.json"  # the symbolic links an archive holds, recorded not packed
REPEATS_JSON = "repeats.json"  # `repeats: {min, max, until}`: how many ran and why they stopped
BETWEEN_LOG = "between.log"  # a session's `server.between` hook
PROFILE_DIR = "profile"  # `profile:`: the engine's trace files for this cell
PROFILE_JSON = "profile.json"  # their summary: milliseconds per phase per decode step
OUTPUTS_JSON = "outputs.json"  # `bench.fingerprint`/`bench.accuracy`: the greedy outputs
