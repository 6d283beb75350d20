"""`orch sim init-repo`: a deterministic SGLang-like git repo with one injected regression.

Same arguments, same SHAs on every machine: names, e-mails and dates are fixed, user and system
git configuration is ignored, and file contents come from a seeded generator. The authors are
invented (at example.invalid) and every message says the commit is simulated. Commit K (1-based)
changes `orch_sim_model.json` (the simulator's performance model) and every later commit keeps
it. Tags: `good` on the first commit, `bad` on HEAD. The setup command is `sh setup.sh`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.sim import model as m

SETUP_COMMAND = "sh setup.sh"
_EPOCH = 1751360400  # 2025-07-01 09:00:00 UTC
# Invented people at a reserved domain (RFC 2606): a simulated regression must never carry a
# real person's name.
AUTHORS = (
    ("Ada Sim", "ada.sim@example.invalid"),
    ("Bram Placeholder", "bram.placeholder@example.invalid"),
    ("Cleo Fixture", "cleo.fixture@example.invalid"),
    ("Dov Mock", "dov.mock@example.invalid"),
    ("Esme Stub", "esme.stub@example.invalid"),
)
# Every commit message says what the repo is, so no log excerpt can pass for a real project's.
SIMULATED_NOTE = "Simulated commit made by `orch sim init-repo`; not from a real project."
_CHANGES = (
    (
        "[Fix] Handle empty stop strings in the detokenizer",
        "python/sglang/srt/managers/detokenizer_manager.py",
    ),
    (
        "Optimize the MoE align kernel launch for small batches",
        "python/sglang/srt/layers/moe/fused_moe.py",
    ),
    ("[Doc] Update the speculative decoding guide", "docs/speculative_decoding.md"),
    ("Refactor the scheduler's batch bookkeeping", "python/sglang/srt/managers/scheduler.py"),
    ("[CI] Bump the nightly accuracy thresholds", "test/srt/test_nightly_accuracy.py"),
    ("Add a metric for the retraction rate", "python/sglang/srt/metrics/collector.py"),
    ("[Minor] Fix typos in server_args help strings", "python/sglang/srt/server_args.py"),
    (
        "Support fp8 block scaling in the fused MoE path",
        "python/sglang/srt/layers/moe/fused_moe.py",
    ),
    (
        "Clean up unused imports in model_executor",
        "python/sglang/srt/model_executor/model_runner.py",
    ),
    (
        "[Bugfix] Correct the chunked prefill budget with radix cache",
        "python/sglang/srt/managers/schedule_policy.py",
    ),
    ("Use a faster top-k in the sampler", "python/sglang/srt/layers/sampler.py"),
    (
        "[Feature] Report cached tokens in meta_info",
        "python/sglang/srt/managers/tokenizer_manager.py",
    ),
    (
        "Reduce host overhead in the tokenizer manager",
        "python/sglang/srt/managers/tokenizer_manager.py",
    ),
    (
        "[Perf] Overlap the grammar mask with the forward pass",
        "python/sglang/srt/constrained/base_grammar_backend.py",
    ),
    ("Bump flashinfer to 0.2.9", "python/pyproject.toml"),
    ("[Router] Retry on connection reset", "sgl-router/src/router.rs"),
    ("[Test] Cover EAGLE-3 with topk 1", "test/srt/test_eagle_infer.py"),
    ("Tidy the radix cache eviction loop", "python/sglang/srt/mem_cache/radix_cache.py"),
    (
        "[Fix] Keep the draft model's dtype in sync with the target",
        "python/sglang/srt/speculative/eagle_worker.py",
    ),
    ("Log the NCCL version at start-up", "python/sglang/srt/distributed/parallel_state.py"),
)
_BUG_TEXT = {
    "verify": (
        "[Spec] Refactor EAGLE verify to share the target's attention metadata",
        "python/sglang/srt/speculative/eagle_worker.py",
        "Build the verify batch through the generic forward path instead of the dedicated\n"
        "cuda-graph runner, so EAGLE and EAGLE-3 share one code path for attention metadata.",
    ),
    "drop-env": (
        "[Launch] Start scheduler processes with a sanitized environment",
        "python/sglang/srt/entrypoints/engine.py",
        "Workers no longer inherit every variable of the launcher: some tuning variables were\n"
        "leaking into child processes. Pass only what the scheduler needs.",
    ),
    "wrong-output": (
        "[Perf] Skip the logits soft-cap in the fused sampler",
        "python/sglang/srt/layers/sampler.py",
        "The soft-cap costs a pass over the logits every step; the fused top-k path makes it\n"
        "unnecessary. About 10% less time per decode step.",
    ),
    "crash": (
        "[Launch] Check the kernel package version before loading weights",
        "python/sglang/srt/entrypoints/engine.py",
        "Fail early when sgl-kernel is older than the version this commit was built against.",
    ),
}


@dataclass(frozen=True)
class RepoInfo:
    """What `init_repo` made: every SHA (oldest first) and the interesting ones."""

    path: Path
    shas: tuple[str, ...]
    regress_at: int
    setup_fail_at: int | None = None
    bugs: tuple[str, ...] = ("verify",)
    setup_command: str = SETUP_COMMAND
    messages: tuple[str, ...] = field(default=())

    @property
    def first(self) -> str:
        """The first commit (tag `good`)."""
        return self.shas[0]

    @property
    def head(self) -> str:
        """The last commit (tag `bad`)."""
        return self.shas[-1]

    @property
    def regress(self) -> str:
        """The commit that introduces the regression."""
        return self.shas[self.regress_at - 1]

    @property
    def setup_fail(self) -> str | None:
        """The commit whose setup fails, if any."""
        return self.shas[self.setup_fail_at - 1] if self.setup_fail_at else None

    def to_json(self) -> dict[str, Any]:
        """The JSON `sim init-repo` prints."""
        return {
            "path": str(self.path),
            "first": self.first,
            "regress": self.regress,
            "head": self.head,
            "regress_at": self.regress_at,
            "setup_fail": self.setup_fail,
            "setup_fail_at": self.setup_fail_at,
            "bugs": list(self.bugs),
            "setup": self.setup_command,
            "tags": {"good": self.first, "bad": self.head},
            "commits": list(self.shas),
        }


def apply_bug(params: dict[str, Any], bug: str) -> dict[str, Any]:
    """Return model params with one bug applied: `verify[:MS]`, `drop-env:VAR,..[@RANK,..]`,
    `crash`, `wrong-output[:SHARE]` (faster, and a share of the greedy answers changed)."""
    out = m.model_params(params)
    kind, _, arg = bug.partition(":")
    if kind == "verify":
        out["eagle"]["verify_ms"] = float(arg) if arg else 29.0
    elif kind == "drop-env":
        names, _, ranks = arg.partition("@")
        if not names:
            raise ValueError("drop-env needs variable names, e.g. drop-env:NCCL_ALGO")
        out["bugs"]["drop_env"] = [n for n in names.split(",") if n]
        out["bugs"]["drop_env_ranks"] = [int(r) for r in ranks.split(",")] if ranks else None
    elif kind == "wrong-output":
        # faster and wrong: a shortcut in the sampler that changes a share of the answers
        out["bugs"]["wrong_outputs"] = float(arg) if arg else 0.25
        out["decode_ms"] = round(float(out["decode_ms"]) * 0.9, 3)
    elif kind == "crash":
        out["bugs"]["crash_on_start"] = arg or "sgl-kernel 0.3.99 or newer is required"
    else:
        raise ValueError(
            f"unknown bug {bug!r} (verify[:MS], drop-env:VAR[@RANKS], crash, wrong-output[:SHARE])"
        )
    return out


def _git(
    path: Path, *args: str, date: int | None = None, author: int = 0, stdin: bytes | None = None
) -> str:
    name, email = AUTHORS[author % len(AUTHORS)]
    stamp = f"{date or _EPOCH} +0000"
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_AUTHOR_DATE": stamp,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
        "GIT_COMMITTER_DATE": stamp,
    }
    cmd = [
        "git",
        "-c",
        "commit.gpgsign=false",
        "-c",
        "core.autocrlf=false",
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "tag.gpgsign=false",
        *args,
    ]
    done = subprocess.run(cmd, cwd=path, env=env, input=stdin, capture_output=True, check=False)
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()
        raise RuntimeError(f"git {' '.join(args)} failed: {err}")
    return done.stdout.decode(errors="replace").strip()


def _message_as_commit_m_stores_it(message: str) -> str:
    # `git commit -m` cleans a message up (cleanup mode "whitespace"): trailing spaces off each
    # line, runs of blank lines made one, no blank line first or last, one newline at the end.
    # fast-import stores it as given, so it is cleaned the same way here: the SHAs stay the same.
    lines: list[str] = []
    for line in message.splitlines():
        line = line.rstrip()
        if line or (lines and lines[-1]):
            lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


def _commit_command(
    mark: int, files: dict[str, str], message: str, date: int, author: int
) -> bytes:
    """A `git fast-import` commit on main: the whole tree (`files`, mode 100644, as `git add -A`
    recorded files written with Path.write_text), by AUTHORS[author] at `date`."""
    name, email = AUTHORS[author % len(AUTHORS)]
    who = f"{name} <{email}> {date} +0000"
    text = _message_as_commit_m_stores_it(message).encode()
    out = [f"commit refs/heads/main\nmark :{mark}\nauthor {who}\ncommitter {who}\n".encode()]
    out.append(b"data %d\n%s\n" % (len(text), text))
    if mark > 1:
        out.append(b"from :%d\n" % (mark - 1))
    out.append(b"deleteall\n")
    for rel, content in sorted(files.items()):
        data = content.encode()
        out.append(f"M 100644 inline {rel}\n".encode() + b"data %d\n%s\n" % (len(data), data))
    out.append(b"\n")
    return b"".join(out)


_SETUP_OK = """#!/bin/sh
# Build step for the simulated serving repo (what `pip install -e python` is for SGLang).
set -e
echo "Installing sglang (simulated) from $(pwd)"
test -f orch_sim_model.json
echo "Successfully installed sglang-0.4.10.post2"
"""
_SETUP_FAIL = """#!/bin/sh
# Build step for the simulated serving repo (what `pip install -e python` is for SGLang).
set -e
echo "Installing sglang (simulated) from $(pwd)"
echo "ERROR: Could not find a version that satisfies the requirement sgl-kernel==0.3.99" >&2
exit 1
"""


def _initial_files() -> dict[str, str]:
    return {
        "README.md": "# sglang (simulated)\n\nA generated repository for orch's simulator: "
        "`orch_sim_model.json` is the\nperformance model `orch sim serve` reads from its "
        "working directory.\n",
        "setup.sh": _SETUP_OK,
        m.MODEL_FILE: m.dump_params(m.model_params()),
        "python/pyproject.toml": '[project]\nname = "sglang"\nversion = "0.4.10.post2"\n',
        "python/sglang/__init__.py": '"""SGLang (simulated)."""\n',
        "python/sglang/version.py": '__version__ = "0.4.10.post2"\n',
    }


def _touch(rng: random.Random, text: str, index: int, path: str) -> str:
    # A small, plausible edit: one more line in the changed file.
    token = rng.randrange(16**6)
    if path.endswith(".md"):
        return text + f"\n- Note {index}: tuned defaults (ref {token:06x}).\n"
    if path.endswith(".toml"):
        return text + f"# dependency pin {index}: {token:06x}\n"
    if path.endswith(".rs"):
        return text + f"// retry budget {index}: {token % 7 + 1}\n"
    return text + f"\n\ndef _helper_{index}() -> int:\n    return {token}\n"


def init_repo(
    path: str | os.PathLike[str],
    commits: int = 16,
    regress_at: int | None = None,
    seed: int = 0,
    bugs: tuple[str, ...] | list[str] = ("verify",),
    setup_fail_at: int | None = None,
) -> RepoInfo:
    """Create the repo at `path` (absent or empty) and return its SHAs."""
    root = Path(path)
    if commits < 2:
        raise ValueError("--commits must be at least 2")
    if regress_at is None:
        regress_at = commits * 2 // 3 + 1
    if not 2 <= regress_at <= commits:
        raise ValueError(f"--regress-at must be within 2..{commits}")
    if setup_fail_at is not None and not 2 <= setup_fail_at <= commits:
        raise ValueError(f"--setup-fail-at must be within 2..{commits}")
    bugs = tuple(bugs) or ("verify",)
    bad_params = m.model_params()
    for bug in bugs:
        bad_params = apply_bug(bad_params, bug)
    if root.exists() and any(root.iterdir()):
        raise ValueError(f"{root} exists and is not empty")
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    files = _initial_files()
    _git(root, "init", "-q", "-b", "main")
    stream = b""
    messages: list[str] = []
    order = list(range(len(_CHANGES)))
    rng.shuffle(order)
    for i in range(1, commits + 1):
        body = ""
        if i == 1:
            subject = "Initial import of the serving engine"
        elif i == regress_at:
            subject, target, body = _BUG_TEXT[bugs[0].partition(":")[0]]
            files[m.MODEL_FILE] = m.dump_params(bad_params)
            files[target] = _touch(rng, files.get(target, '"""Module."""\n'), i, target)
        else:
            subject, target = _CHANGES[order[(i - 2) % len(order)]]
            files[target] = _touch(rng, files.get(target, '"""Module."""\n'), i, target)
        if setup_fail_at is not None and i == setup_fail_at:
            subject = "[Build] Require sgl-kernel 0.3.99" if i != regress_at else subject
            files["setup.sh"] = _SETUP_FAIL
        elif setup_fail_at is not None and i == setup_fail_at + 1:
            subject = "[Build] Revert the sgl-kernel requirement"
            files["setup.sh"] = _SETUP_OK
        subject = f"{subject} (#{8000 + 13 * i + seed % 97})"
        message = subject + ("\n\n" + body if body else "") + "\n\n" + SIMULATED_NOTE
        stream += _commit_command(i, files, message, _EPOCH + 5400 * i, rng.randrange(5))
        messages.append(subject)
    stream += b"reset refs/tags/good\nfrom :1\n\n" + b"reset refs/tags/bad\nfrom :%d\n\n" % commits
    # One git process writes every commit (a commit each took three before); then the work tree
    # is checked out at HEAD, as it was when the files were written and committed one by one.
    _git(root, "fast-import", "--quiet", "--done", stdin=stream + b"done\n")
    _git(root, "reset", "-q", "--hard")
    shas = _git(root, "rev-list", "--reverse", "HEAD").split()
    return RepoInfo(
        root.resolve(), tuple(shas), regress_at, setup_fail_at, bugs, SETUP_COMMAND, tuple(messages)
    )


def build_parser() -> argparse.ArgumentParser:
    """`sim init-repo` arguments."""
    p = argparse.ArgumentParser(prog="orch sim init-repo", description=__doc__)
    p.add_argument("dir")
    p.add_argument("--commits", type=int, default=16)
    p.add_argument("--regress-at", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--bug",
        action="append",
        default=None,
        help="verify[:MS] (default), drop-env:VAR[,VAR][@RANK,..], crash, wrong-output[:SHARE];"
        " repeatable",
    )
    p.add_argument("--setup-fail-at", type=int, default=None)
    return p


def main(argv: list[str]) -> int:
    """Entry point: print the repo's SHAs as JSON; exit 2 on bad arguments."""
    args = build_parser().parse_args(argv)
    try:
        info = init_repo(
            args.dir,
            args.commits,
            args.regress_at,
            args.seed,
            tuple(args.bug or ("verify",)),
            args.setup_fail_at,
        )
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(info.to_json(), indent=2))
    return 0
