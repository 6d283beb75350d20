"""What every adapter is: the two interfaces and what a parsed repeat and a metric are.

Adapters are pure: `build()` turns a rendered playbook section into a `ServerSpec`/`BenchSpec`
(from the helpers in sections.py), and the parsers read plain files of a cell directory (with
outputs.py). Nothing here starts a process or prints.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from orchestrator.cell import BenchSpec, Cell, RunInputs, ServerSpec, Watch, canonical_json
from orchestrator.runner.layout import STDOUT

# SGLang and vLLM re-title their workers with setproctitle, which moves the environment away
# and zeroes /proc/PID/environ: SPT_NOENV=1 (setproctitle's own switch) keeps it readable, so
# every worker's env can be verified and its cell marker found (docs/FACTS.md).
TITLE_ENV_DEFAULTS: dict[str, str] = {"SPT_NOENV": "1"}


@dataclass
class RepeatResult:
    """What one benchmark run gave: metrics, where each came from, and what could not be read.

    `sources` maps a metric name to a short label of its origin (e.g. `accept_length` ->
    `server_info_delta`); `notes` says in words what was missing or approximated.
    """

    metrics: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


Better = Literal["higher", "lower", "neither"]


@dataclass(frozen=True)
class MetricInfo:
    """One metric an adapter can report: its unit (one per quantity across adapters: rates of
    acceptance are fractions, times ms or s), which way is better, where it is read from, and
    the client versions that write it (empty: every version)."""

    name: str
    unit: str
    better: Better
    source: str
    versions: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The entry as `orch metrics --json` prints it."""
        return {
            "name": self.name,
            "unit": self.unit,
            "better": self.better,
            "source": self.source,
            "versions": list(self.versions),
        }


# The headline throughput, first found wins: what a cell with no `expect:` is judged on.
HEADLINE_THROUGHPUT = ("output_throughput", "request_throughput", "total_token_throughput")


class ServerAdapter(ABC):
    """How a serving engine's `server:` section becomes a process, and what its logs say."""

    name: ClassVar[str]

    @abstractmethod
    def build(self, section: Mapping[str, Any]) -> ServerSpec:
        """Turn the rendered `server:` section (args merged into one dict) into a ServerSpec."""

    def analyze(self, cell_dir: Path, cell: Cell) -> dict[str, Any]:
        """Read a finished cell directory: {"metrics": {}, "facts": {}, "checks": []}."""
        return {"metrics": {}, "facts": {}, "checks": []}

    def reset_url(self, spec: ServerSpec) -> str | None:
        """What to POST between two cells sharing one server (a cache flush), if anything."""
        return None

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """The metrics `analyze` may report (metrics.json's `server` block)."""
        return ()

    def profile_urls(self, spec: ServerSpec) -> tuple[str, str | None] | None:
        """Where to POST to start and stop the engine's profiler (`profile:`), if it has one
        orch can point at a folder per cell."""
        return None


# Where the client finds the server: not a part of what it sends.
_WHERE_ARGS = ("base-url", "host", "port")


def workload_key(spec: BenchSpec) -> str:
    """A short hash of what a bench sends: its adapter and args, less where the server listens,
    so that the same workload gets the same prompts in its n-th run on any port or host."""
    args = {k: v for k, v in spec.args.items() if k not in _WHERE_ARGS}
    return hashlib.sha256(canonical_json([spec.adapter, args]).encode()).hexdigest()[:16]


class BenchAdapter(ABC):
    """How a benchmark client's `bench:` section becomes argv, and its output becomes metrics."""

    name: ClassVar[str]

    @abstractmethod
    def build(self, section: Mapping[str, Any], server: ServerSpec | None) -> BenchSpec:
        """Turn the rendered `bench:` section into a BenchSpec aimed at `server`."""

    @abstractmethod
    def parse_repeat_with_sources(self, repeat_dir: Path, cell: Cell) -> RepeatResult:
        """Metrics of one run (a `bench/<n>` or `bench/warmup-<n>` dir) with their sources."""

    # An open-ended adapter reports whatever its client writes: expect: names are not checked.
    open_ended: ClassVar[bool] = False
    # Names a metric had before, with what to write now (validate says so instead of guessing).
    renamed: ClassVar[dict[str, str]] = {}

    # The client's own seed flag for its random or synthetic prompts (None: orch cannot tell
    # what the client sends), and the `args` key that pins it.
    seed_flag: ClassVar[str | None] = None
    seed_arg: ClassVar[str] = "seed"

    def run_inputs(self, spec: BenchSpec) -> RunInputs | None:
        """What each run adds to its argv so that it sends prompts of its own (`cache: fresh`):
        the seed flag with a seed per run, unless `args` pins the seed; None when nothing."""
        if spec.cache == "warm" or self.seed_flag is None or self.seed_arg in spec.args:
            return None
        return RunInputs(seed_flag=self.seed_flag, seed_key=workload_key(spec))

    def sends(self, spec: BenchSpec) -> str:
        """What one run sends, in words, for `orch plan` ("24 random prompts")."""
        return "what its argv says (orch cannot tell what this client sends)"

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """Every metric a repeat may report (regex metrics under `metrics:` come on top)."""
        return ()

    def knows(self, name: str) -> bool:
        """Whether `name` is a metric this adapter can report (see `catalogue`)."""
        return any(info.name == name for info in self.catalogue())

    def watch(self, spec: BenchSpec, metric: str) -> Watch | None:
        """Where the runner reads `metric` between repeats (`repeats: {until}`), or None when
        only the controller's parse can tell it; a regex metric is read from stdout."""
        pattern = spec.metrics.get(metric)
        if pattern is None:
            return None
        return Watch(metric=metric, file=STDOUT, format="regex", pattern=pattern)

    def parse_repeat(self, repeat_dir: Path, cell: Cell) -> dict[str, float]:
        """Metrics of one run, as floats (see `parse_repeat_with_sources` for provenance)."""
        return self.parse_repeat_with_sources(repeat_dir, cell).metrics
