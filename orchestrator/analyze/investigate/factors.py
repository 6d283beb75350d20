"""The factors of an investigation: what GOOD and BAD declared differently, and BAD with one of
them set back to GOOD's value.

A factor is a declared difference a cell can be re-rendered without: the server's image (set
back to GOOD's recorded digest, never resolved again), the commit, the repo's setup command
(what it installs: packages the playbook controls), one env variable, one server flag, one
bench setting. What the playbook does not declare (the driver, clocks, packages it does not
install) cannot be swapped; those come from the snapshots' diff and are listed as evidence
only (`diff_evidence`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.adapters import guidellm, sglang, vllm
from orchestrator.adapters.flags import ListStyle, flags_to_argv
from orchestrator.cell import cell_id
from orchestrator.errors import InputError
from orchestrator.runner.redaction import REDACTED

Kind = Literal["image", "commit", "setup", "env", "server_flag", "bench_setting"]
# The list styles an adapter renders flags with: argv is rebuilt only when it re-renders as
# recorded, so a hand-written launcher or a generic command is never edited by guess.
_LIST_STYLES: dict[str, Mapping[str, ListStyle]] = {
    "sglang": sglang.LIST_STYLES,
    "vllm": vllm.LIST_STYLES,
    "guidellm": guidellm.LIST_STYLES,
    "aiperf": {},  # AIPerf's flags: argparse-like, lists as nargs
}
# Per-cell bench settings that are how long to measure, not what: never a factor.
_NOT_FACTORS = frozenset({"repeats", "warmup", "timeout", "settle"})
INVESTIGATE_AXIS = "investigate"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _one_line(text: str) -> str:
    """A name or value from a bundle on one line: a newline in it could fake a line of output."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


@dataclass(frozen=True)
class Factor:
    """One declared difference: `good` and `bad` are the values (None: not set on that side)."""

    kind: Kind
    name: str
    good: Any
    bad: Any
    testable: bool = True
    why_not: str | None = None

    @property
    def label(self) -> str:
        """`image`, `commit`, `env NCCL_ALGO`, `server --tp-size`, `bench --max-concurrency`."""
        if self.kind == "image":
            return "image"
        if self.kind in ("commit", "setup"):
            return "commit" if self.kind == "commit" else "repo setup"
        prefix = {"env": "env ", "server_flag": "server --", "bench_setting": "bench --"}
        return prefix[self.kind] + _one_line(self.name)

    def shown(self, value: Any) -> str:
        """A value as the report says it; a commit by its short SHA."""
        if value is None:
            return "(not set)"
        if self.kind == "commit":
            return str(value)[:12]
        if self.kind == "image":
            ref, _, digest = str(value).rpartition("@")
            return _one_line(f"{ref} ({digest[:19]})" if ref else str(value))
        return _one_line(str(value))


def _differences(good: Mapping[str, Any], bad: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    names = list(good) + [k for k in bad if k not in good]
    return [(k, good.get(k), bad.get(k)) for k in names if good.get(k) != bad.get(k)]


def _section(cell: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = cell.get(name)
    return value if isinstance(value, Mapping) else {}


def _container(cell: Mapping[str, Any]) -> Mapping[str, Any]:
    return _section(_section(cell, "server"), "container")


def _pinned_image(container: Mapping[str, Any]) -> str | None:
    """`REF@sha256:...`: the image as written, pinned to its recorded digest (as written when
    it was written with one; the reference alone when no digest was recorded)."""
    image, digest = container.get("image"), container.get("digest")
    if not image:
        return None
    return f"{image}@{digest}" if digest and "@" not in str(image) else str(image)


def image_factor(good: Mapping[str, Any], bad: Mapping[str, Any]) -> Factor | None:
    """The server's image when GOOD and BAD ran different ones (by digest where both were
    pinned: two tags of one digest are one image), else None."""
    cont_g, cont_b = _container(good), _container(bad)
    if not cont_g and not cont_b:
        return None
    if cont_g.get("digest") and cont_g.get("digest") == cont_b.get("digest"):
        return None
    pin_g, pin_b = _pinned_image(cont_g), _pinned_image(cont_b)
    if pin_g == pin_b:
        return None
    why = None
    if not cont_g or not cont_b:
        why = "only one side runs its server in a container"
    elif not cont_g.get("digest"):
        why = "GOOD's record has no digest for its image"
    return Factor("image", "image", pin_g, pin_b, why is None, why)


def declared_factors(good: Mapping[str, Any], bad: Mapping[str, Any]) -> list[Factor]:
    """Every declared difference between two recorded cells, the image and the commit first.

    A secret env value is never in a bundle, so a difference in one cannot be seen; a side
    without a server, a repo or flags rendered by a known adapter makes that part untestable.
    """
    out: list[Factor] = []
    image = image_factor(good, bad)
    if image is not None:
        out.append(image)
    repo_g, repo_b = _section(good, "repo"), _section(bad, "repo")
    if repo_g.get("version") != repo_b.get("version"):
        same_repo = repo_g.get("url") == repo_b.get("url") and repo_g and repo_b
        out.append(
            Factor(
                "commit",
                "commit",
                repo_g.get("version"),
                repo_b.get("version"),
                testable=bool(same_repo),
                why_not=None if same_repo else "the two cells pin different repositories",
            )
        )
    if repo_g and repo_b and repo_g.get("setup") != repo_b.get("setup"):
        # what the setup installs (packages, a build) is declared here, so it can be swapped
        out.append(Factor("setup", "setup", repo_g.get("setup"), repo_b.get("setup")))
    env_g, env_b = _section(good, "env"), _section(bad, "env")
    for name, g, b in _differences(env_g, env_b):
        secret = REDACTED in (str(g), str(b))
        # a name from a bundle becomes a variable in the experiment's cell: only a real one
        odd = None if _ENV_NAME.match(str(name)) else "not an environment variable name"
        why = "a secret value" if secret else odd
        out.append(Factor("env", name, g, b, why is None, why))
    sections: tuple[tuple[Kind, str], ...] = (("server_flag", "server"), ("bench_setting", "bench"))
    for kind, section in sections:
        spec_g, spec_b = _section(good, section), _section(bad, section)
        args_g, args_b = _section(spec_g, "args"), _section(spec_b, "args")
        rebuildable = _rebuilt_argv(spec_b, dict(args_b)) is not None
        for name, g, b in _differences(args_g, args_b):
            if name in _NOT_FACTORS:
                continue
            out.append(
                Factor(
                    kind,
                    name,
                    g,
                    b,
                    rebuildable,
                    None if rebuildable else f"BAD's {section} argv is not rendered from its args",
                )
            )
    return out


def _rebuilt_argv(spec: Mapping[str, Any], args: Mapping[str, Any]) -> list[str] | None:
    """The argv with the flags rendered from `args`, or None when the recorded argv does not
    hold its recorded args' flags exactly once, in one run (a generic command, say)."""
    argv = [str(a) for a in spec.get("argv") or []]
    recorded = _section(spec, "args")
    styles = _LIST_STYLES.get(str(spec.get("adapter", "")).split(".")[0])
    if styles is None or not recorded:
        return None
    try:
        old = flags_to_argv(recorded, list_styles=styles)
        new = flags_to_argv(args, list_styles=styles)
    except InputError:  # a value the renderer refuses: not rebuildable
        return None
    # the flags sit as one run of tokens: after the launcher, before what an adapter appends
    starts = [i for i in range(len(argv) - len(old) + 1) if argv[i : i + len(old)] == old]
    if len(starts) != 1:
        return None
    return argv[: starts[0]] + new + argv[starts[0] + len(old) :]


def swapped(bad: Mapping[str, Any], factors: Sequence[Factor]) -> dict[str, Any]:
    """BAD's recorded cell with each of `factors` set back to GOOD's value, under a new id
    (axis `investigate` names the swap, so `orch show` tells the experiments apart)."""
    data: dict[str, Any] = {k: v for k, v in bad.items() if k != "id"}
    for factor in factors:
        if not factor.testable:
            raise ValueError(f"{factor.label} cannot be swapped: {factor.why_not}")
        if factor.kind == "image":
            # GOOD's digest as recorded, written into the reference: nothing resolves it again
            server = dict(_section(data, "server"))
            pinned = str(factor.good)
            server["container"] = {
                **_section(server, "container"),
                "image": pinned,
                "digest": pinned.rpartition("@")[2],
                "resolved_at": None,
                "resolved_by": "GOOD's record",
            }
            data["server"] = server
        elif factor.kind == "commit":
            repo = dict(_section(data, "repo"))
            repo.update(version=factor.good, requested=None, resolved_at=None, resolved_by=None)
            data["repo"] = repo
        elif factor.kind == "setup":
            data["repo"] = {**_section(data, "repo"), "setup": factor.good}
        elif factor.kind == "env":
            env = dict(_section(data, "env"))
            if factor.good is None:
                env.pop(factor.name, None)
            else:
                env[factor.name] = factor.good
            data["env"] = env
        else:
            section = "server" if factor.kind == "server_flag" else "bench"
            spec = dict(_section(data, section))
            args = dict(_section(spec, "args"))
            if factor.good is None:
                args.pop(factor.name, None)
            else:
                args[factor.name] = factor.good
            argv = _rebuilt_argv(spec, args)
            if argv is None:
                raise ValueError(f"{factor.label}: the argv cannot be rebuilt")
            spec.update(args=args, argv=argv)
            data[section] = spec
    label = "+".join(f"{f.label}={f.shown(f.good)}" for f in factors) or "as-is"
    return relabeled(data, label)


def relabeled(cell: Mapping[str, Any], label: str) -> dict[str, Any]:
    """A recorded cell as an experiment of its own (GOOD or BAD measured now): the same spec
    with axis `investigate` set, so its id differs from the recorded one."""
    axes = {**_section(cell, "axes"), INVESTIGATE_AXIS: label}
    data = {k: v for k, v in cell.items() if k != "id"}
    data["axes"] = axes
    return {**data, "id": cell_id(axes, str(cell.get("host", "")), data)}
