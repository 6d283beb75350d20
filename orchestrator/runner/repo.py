"""The repo and setup steps: pin a clone to one commit, check it is the declared repository's,
and run the setup command once per (dest, commit, command)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

from orchestrator.runner.context import CellContext
from orchestrator.runner.layout import REPO_JSON, SETUP_LOG
from orchestrator.runner.protocol import (
    StepFailed,
    display_path,
    home_dir,
    now,
    resolve_path,
    tail_lines,
    unlink_quietly,
    with_tail,
    write_json,
)
from orchestrator.runner.redaction import REDACTED
from orchestrator.runner.remote_refs import is_commit_name

# `scheme://rest`, as git's is_url() sees it (a scheme is letters, digits, `+`, `-`, `.`).
_URL_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/]*)(.*)$", re.DOTALL)
# In .git of a clone orch made and has not checked out yet (see RepoSteps.do_repo).
UNFINISHED_CLONE = "orch-unfinished-clone"
# Schemes whose user name is an account on the host (part of which repository), not a credential.
_SSH_SCHEMES = ("ssh", "git+ssh", "ssh+git")


def is_local_repo_url(url: str) -> bool:
    """True when git reads `url` as a local path (git's rule: no `:` before the first `/`)."""
    if url.startswith("file://"):
        return True
    if _URL_SCHEME_RE.match(url):
        return False
    colon, slash = url.find(":"), url.find("/")
    return colon < 0 or 0 <= slash < colon


def local_repo_path(path: str, base: str) -> str:
    """The real path of the repository a local `path` names, as git finds it.

    `~` is expanded and a relative path is taken against `base`. git tries `<path>/.git`,
    `<path>`, `<path>.git/.git` and `<path>.git` in this order; a work tree and its `.git`
    directory name the same repository, so the answer is the work tree.
    """
    path = resolve_path(path, base)
    for suffix in ("/.git", "", ".git/.git", ".git"):
        if os.path.isdir(path + suffix):
            path = path + suffix
            break
    real = os.path.realpath(path)
    if os.path.basename(real) == ".git":
        real = os.path.dirname(real)
    return real


def repo_url_key(url: str, base: str) -> str:
    """A comparison key for a repository URL: equal keys name the same repository.

    Local paths (also `file://` ones) become the real path of the repository (`base` for a
    relative one). Other URLs lose trailing `/` and `.git`, their scheme and host are lowercased,
    and credentials are dropped (an http(s) user or token says who fetches, not what; an ssh
    user is kept).
    """
    if url.startswith("file://"):
        # git percent-decodes file URLs (file:///a%20b is the directory "a b").
        return "path:" + local_repo_path(urllib.parse.unquote(url[len("file://") :]), base)
    if is_local_repo_url(url):
        return "path:" + local_repo_path(url, base)
    match = _URL_SCHEME_RE.match(url)
    if match:
        scheme, authority, rest = match.group(1).lower(), match.group(2), match.group(3)
        user, _at, hostport = authority.rpartition("@")
        user = user.partition(":")[0] if scheme in _SSH_SCHEMES else ""
        url = "%s://%s%s%s" % (scheme, user + "@" if user else "", hostport.lower(), rest)
    elif not url.startswith("["):
        # scp-like [user@]host:path (a bracketed IPv6 host is compared as written)
        userhost, _colon, path = url.partition(":")
        user, at, host = userhost.rpartition("@")
        url = "%s%s%s:%s" % (user, at, host.lower(), path)
    url = url.rstrip("/")
    if url.endswith(".git"):
        url = url[: -len(".git")].rstrip("/")
    return "url:" + url


def masked_url(url: str) -> str:
    """`url` with credentials hidden (an http(s) user or token, an ssh password) for display.

    The clone's origin may hold a token the controller never saw, so no redactor knows it.
    """
    match = _URL_SCHEME_RE.match(url)
    if not match or "@" not in match.group(2):
        return url
    user, _at, hostport = match.group(2).rpartition("@")
    if match.group(1).lower() in _SSH_SCHEMES:
        name, colon, _password = user.partition(":")
        user = name + (":" + REDACTED if colon else "")
    else:
        user = REDACTED
    return "%s://%s@%s%s" % (match.group(1), user, hostport, match.group(3))


def rewrite_url(url: str, rules: List[Tuple[str, str]]) -> str:
    """`url` after git's `url.<base>.insteadOf <prefix>` rules (the longest prefix wins)."""
    best: Optional[Tuple[str, str]] = None
    for base, prefix in rules:
        if url.startswith(prefix) and (best is None or len(prefix) > len(best[1])):
            best = (base, prefix)
    return best[0] + url[len(best[1]) :] if best else url


class RepoChecks:
    """Is the clone at a repo dest the declared repository's? Used by the repo step, and by
    `runner.pyz check-origin` for the controller (bisect reads the commit list from the clone)."""

    def git_ok(self, args: List[str], cwd: str) -> Tuple[bool, str]:
        """Run git; (succeeded, stdout)."""
        env = dict(os.environ)
        env["GIT_TERMINAL_PROMPT"] = "0"
        proc = subprocess.run(
            ["git", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        return proc.returncode == 0, proc.stdout.decode("utf-8", "replace")

    def check_existing_clone(self, dest: str) -> None:
        """StepFailed unless the non-empty `dest` is a git clone of its own."""
        if not self.git_ok(["rev-parse", "--git-dir"], dest)[0]:
            raise StepFailed("repo dest %s exists and is not a git repository" % dest)
        self.check_own_work_tree(dest)

    def check_own_work_tree(self, dest: str) -> None:
        """StepFailed unless `dest` is the top of a git work tree (its own clone).

        `rev-parse --git-dir` also succeeds in a plain directory inside another repository (a
        dotfiles repo in $HOME): checking out there would move that repository's HEAD.
        """
        ok, out = self.git_ok(["rev-parse", "--show-toplevel"], dest)
        if not ok or not out.strip():
            raise StepFailed(
                "repo dest %s exists and is not a git work tree (a bare repository or a .git "
                "directory?); give the repo another repo.dest" % dest
            )
        top = os.path.realpath(out.strip())
        if top != os.path.realpath(dest):
            raise StepFailed(
                "repo dest %s is not a clone of its own: it lies inside the git work tree %s; "
                "give the repo a repo.dest outside it" % (dest, top)
            )

    def insteadof_rules(self, dest: str) -> List[Tuple[str, str]]:
        """git's `url.<base>.insteadOf <prefix>` rules as (base, prefix), as seen in `dest`."""
        # -z: a base may hold spaces; each record is `key\nvalue\0`.
        ok, out = self.git_ok(["config", "-z", "--get-regexp", r"^url\..*\.insteadof$"], dest)
        rules: List[Tuple[str, str]] = []
        for record in out.split("\0") if ok else ():
            key, _nl, prefix = record.partition("\n")
            if key.lower().startswith("url.") and key.lower().endswith(".insteadof"):
                rules.append((key[len("url.") : -len(".insteadof")], prefix))
        return rules

    def check_origin(self, dest: str, url: str, checked: bool = True) -> str:
        """The URL the clone at `dest` fetches from (its origin, after insteadOf rules).

        When `checked`, StepFailed unless that origin is the repository `url` names: a clone of
        another repository (a fork, another project) at the same dest is never reused, because
        its tags and branches would silently stand for the declared repository's.
        """
        ok, out = self.git_ok(["config", "--get-all", "remote.origin.url"], dest)
        configured = out.splitlines()[0] if ok and out.strip() else ""
        if not configured:
            raise StepFailed(
                "repo dest %s is a git clone without an origin remote, so it cannot be shown to "
                "hold repo.url %s; give this repo its own repo.dest or remove that clone"
                % (dest, masked_url(url))
            )
        rules = self.insteadof_rules(dest)
        origin = rewrite_url(configured, rules)  # what `git fetch` (first url) contacts
        if not checked:
            return origin
        home = home_dir()
        # A relative origin is relative to the clone; a relative repo.url to $HOME (clone's cwd).
        if repo_url_key(configured, dest) == repo_url_key(url, home):
            return origin
        if repo_url_key(origin, dest) == repo_url_key(rewrite_url(url, rules), home):
            return origin
        raise StepFailed(
            "repo dest %s is a clone of %s, not of repo.url %s; give this repo its own "
            "repo.dest, or remove the old clone, or, if both name the same repository, point "
            "the clone there: git -C %s remote set-url origin %s"
            % (
                dest,
                masked_url(origin),
                masked_url(url),
                shlex.quote(dest),
                shlex.quote(masked_url(url)),
            )
        )


class RepoSteps(CellContext, RepoChecks):
    """Steps 1 and 2 of a cell: repo (clone, dirty policy, pin) and setup (cached).

    CellContext's git_ok comes first: inside a cell, git runs within the cell's time left.
    """

    # step 1: repo
    def do_repo(self) -> Dict[str, Any]:
        repo = self.repo
        assert repo is not None
        dest = resolve_path(str(repo["dest"]))
        self.repo_dest = dest
        version = str(repo["version"])
        policy = str(repo.get("dirty", "refuse"))
        home = home_dir()
        cloned = False
        resumed = False
        if os.path.isdir(dest) and os.listdir(dest) and self.unfinished_clone(dest):
            # orch cloned it and never checked it out (a failed first run): every file shows
            # as deleted, which is no user's work. Finish it when it is the declared
            # repository's, else redo it.
            try:
                self.check_existing_clone(dest)
                self.check_origin(dest, str(repo["url"]))
                resumed = True
            except StepFailed:
                shutil.rmtree(dest)
        if resumed:
            cloned = True
        elif not os.path.isdir(dest) or not os.listdir(dest):
            if self.fetch_policy() == "never":
                raise StepFailed(
                    "repo dest %s holds no clone and repo.fetch is never (nothing is fetched); "
                    "clone %s there first, or set repo.fetch: always"
                    % (dest, masked_url(str(repo["url"])))
                )
            parent = os.path.dirname(dest)
            os.makedirs(parent, exist_ok=True)
            # `--`: a URL starting with "-" is a URL, never an option (--upload-pack=...).
            self.git(["clone", "--no-checkout", "--", str(repo["url"]), dest], home)
            self.mark_unfinished_clone(dest)
            cloned = True
        else:
            self.check_existing_clone(dest)
        # Before the dirty policy too: `reset` must never clean a checkout of another repository.
        origin = self.check_origin(dest, str(repo["url"]), checked=not cloned)

        porcelain = ""
        if not cloned:
            porcelain = self.git(["status", "--porcelain", "--untracked-files=all"], dest)
        dirty = bool(porcelain.strip())
        action = "none"
        if dirty:
            if policy == "refuse":
                files = [ln[3:] for ln in porcelain.splitlines() if ln.strip()]
                shown = ", ".join(files[:20]) + (" ..." if len(files) > 20 else "")
                raise StepFailed(
                    "repo dest is dirty: %s (%s; set repo.dirty: reset or record)" % (shown, dest)
                )
            if policy == "reset":
                self.git(["reset", "--hard", "-q"], dest)
                self.git(["clean", "-fdxq"], dest)
                self.force_setup = True  # clean -x may have removed setup's build outputs
                action = "reset"
            else:
                action = "recorded"

        sha, source, fetched = self.resolve_version(dest, version)
        self.git(["checkout", "-q", "--detach", sha], dest)
        head = self.git(["rev-parse", "HEAD"], dest).strip()
        if head != sha:
            raise StepFailed("HEAD is %s after checkout, expected %s" % (head, sha))
        unlink_quietly(self.unfinished_marker(dest))
        self.repo_sha = sha
        describe = self.git(["describe", "--always", "--tags", "--dirty"], dest, False).strip()
        # the committer date orders a results history by commit when run times do not
        committed = self.git(["show", "-s", "--format=%cI", sha], dest, False).strip()
        after = self.git(["status", "--porcelain", "--untracked-files=all"], dest, False)
        reflog = self.git(["reflog", "-n", "50", "--date=iso"], dest, False).splitlines()
        write_json(
            self.path(REPO_JSON),
            {
                "url": repo["url"],
                "origin_url": masked_url(origin),
                "dest": dest,
                **self.resolution_record(sha),
                "fetch": self.fetch_policy(),
                "resolved_from": source,
                "sha": sha,
                "describe": describe,
                "commit_date": committed or None,
                "status_porcelain": porcelain,
                "dirty": dirty,
                "dirty_action": action,
                "status_after": after,
                "reflog": reflog,
                "fetched": fetched,
                "cloned": cloned,
                "finished_earlier_clone": resumed,
            },
        )
        return {"sha": sha, "describe": describe, "dirty": dirty, "fetched": fetched}

    def unfinished_marker(self, dest: str) -> str:
        """The file in .git that says orch made this clone and has not checked it out yet."""
        return os.path.join(dest, ".git", UNFINISHED_CLONE)

    def unfinished_clone(self, dest: str) -> bool:
        """True when orch cloned `dest` and no checkout has happened since."""
        return os.path.isfile(self.unfinished_marker(dest))

    def mark_unfinished_clone(self, dest: str) -> None:
        """Mark a fresh `--no-checkout` clone as orch's until its first checkout."""
        with open(self.unfinished_marker(dest), "w", encoding="utf-8") as fh:
            note = "cloned by orch (run %s cell %s), not checked out yet\n"
            fh.write(note % (self.run_id, self.cell_id))

    def _rev(self, dest: str, ref: str) -> Optional[str]:
        ok, out = self.git_ok(["rev-parse", "--verify", "--quiet", ref + "^{commit}"], dest)
        return out.strip() if ok and out.strip() else None

    def resolve_version(self, dest: str, version: str) -> Tuple[str, str, bool]:
        """The full SHA `version` names: (sha, the ref it came from, fetched?).

        A commit name (hex) already in the clone is used as is. Any other name means the
        origin's ref as it is now: fetched first, tags with force (a tag the origin moved, or a
        history it rebuilt, replaces the clone's), never a stale local branch or tag. With
        `repo.fetch: never` the clone's refs are used as they are and nothing is fetched.
        """
        assert self.repo is not None
        if version.startswith("-"):
            raise StepFailed("repo.version %r is not a ref" % version)
        is_hex = is_commit_name(version)
        candidates = [version] if is_hex else ["origin/" + version, version]
        if self.fetch_policy() == "never":
            for ref in candidates:
                sha = self._rev(dest, ref)
                if sha:
                    return sha, ref, False
            raise StepFailed(
                "unknown ref %r in the clone at %s (repo.fetch is never: nothing was fetched; "
                "fetch it there, or set repo.fetch: always)" % (version, dest)
            )
        if is_hex:
            sha = self._rev(dest, version)
            if sha:
                return sha, version, False
        # origin only: a tag of another remote the user added must not stand in for the
        # declared repo's. --force: a tag the origin moved is updated, never kept stale.
        self.git(["fetch", "--force", "--tags", "--", "origin"], dest)
        for ref in candidates:
            sha = self._rev(dest, ref)
            if sha:
                return sha, ref, True
        # A commit no branch or tag reaches: ask the remote for it by name.
        if self.git_ok(["fetch", "-q", "--", "origin", version], dest)[0]:
            sha = self._rev(dest, "FETCH_HEAD")
            if sha and (not is_hex or sha.lower().startswith(version.lower())):
                return sha, "FETCH_HEAD", True
        raise StepFailed(
            "unknown ref %r in %s (not found after git fetch)"
            % (version, masked_url(str(self.repo["url"])))
        )

    def fetch_policy(self) -> str:
        """`repo.fetch`: always (the origin's refs as they are now) or never (the clone's)."""
        assert self.repo is not None
        return "never" if str(self.repo.get("fetch", "always")) == "never" else "always"

    def resolution_record(self, sha: str) -> Dict[str, Any]:
        """What repo.json says of how the requested ref became `sha`: by whom and when."""
        assert self.repo is not None
        requested = self.repo.get("requested")
        if requested and self.repo.get("resolved_by"):  # pinned for the whole run
            return {
                "requested": requested,
                "resolved": sha,
                "resolved_at": self.repo.get("resolved_at"),
                "resolved_by": self.repo.get("resolved_by"),
            }
        record = {
            "requested": str(self.repo["version"]),
            "resolved": sha,
            "resolved_at": now(),
            "resolved_by": "host %s" % self.cell.get("host", ""),
        }
        if self.fetch_policy() == "never":
            record["fetch_note"] = (
                "repo.fetch is never: resolved in the clone as it was, nothing fetched; the "
                "origin may name another commit now"
            )
        return record

    # step 2: setup
    def do_setup(self) -> Dict[str, Any]:
        repo = self.repo
        assert repo is not None and self.repo_dest is not None and self.repo_sha is not None
        setup = str(repo["setup"])
        key = hashlib.sha256(
            json.dumps([self.repo_dest, self.repo_sha, setup]).encode("utf-8")
        ).hexdigest()
        cache_dir = os.path.join(self.workdir, "setup-cache")
        marker = os.path.join(cache_dir, key + ".ok")
        log = self.path(SETUP_LOG)
        if os.path.exists(marker) and not self.force_setup:
            with open(log, "w", encoding="utf-8") as fh:
                fh.write(
                    "cached: setup already succeeded for %s at %s (%s)\n"
                    % (self.repo_dest, self.repo_sha, display_path(marker))
                )
            return {"cached": True, "key": key}
        timeout = min(float(repo.get("setup_timeout", 3600.0)), self.remaining())
        env = self.base_env()
        start = now()
        with open(log, "ab") as fh:
            try:
                proc = self.spawn(
                    ["bash", "-c", setup],
                    cwd=self.repo_dest,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                )
            except OSError as exc:
                raise StepFailed("cannot run setup: %s" % exc) from exc
            rc, timed_out, _why = self.wait_proc(proc, timeout)
        if timed_out:
            raise StepFailed(
                with_tail("setup timed out after %gs" % timeout, tail_lines(log), SETUP_LOG)
            )
        if rc != 0:
            raise StepFailed(with_tail("setup failed (rc %s)" % rc, tail_lines(log), SETUP_LOG))
        os.makedirs(cache_dir, exist_ok=True)
        write_json(
            marker,
            {"dest": self.repo_dest, "sha": self.repo_sha, "setup": setup, "at": now()},
        )
        return {"cached": False, "key": key, "seconds": round(now() - start, 3)}
