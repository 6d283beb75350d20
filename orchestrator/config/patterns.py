"""Ansible host patterns, for a playbook's `hosts:` and for `--limit`.

A pattern is a comma-separated list of terms (colons also separate, Ansible's old style). A term is
`all` or `*`, a group or host name, a glob (`gpu*`), or a regex after `~`; `!term` excludes and
`&term` intersects. Plain terms are evaluated first, then `&`, then `!`; a pattern of only `&`/`!`
terms starts from `all`. `group[0]`, `group[-1]`, `group[1:3]` pick hosts of a term by position
(inclusive, as Ansible does). The result is in inventory order.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable
from pathlib import Path

from orchestrator.config.host import Inventory
from orchestrator.errors import InputError, SourceLocation

_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]*):([0-9]*))\]$")
# Ansible's old colon-separated form: a term is anything but whitespace, ':' and brackets, or a
# whole bracketed expression (so `gpu[1:3]` stays one term).
_OLD_STYLE_TERM = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
# Ansible also matches host names (not only groups) when a term holds one of these.
_HOST_MATCH_CHARS = ".?*["


def split_pattern(pattern: str) -> list[str]:
    """The terms of a pattern: split on commas, else on colons that are not inside brackets."""
    if "," in pattern:
        parts = pattern.split(",")
    elif ":" in pattern and not pattern.lstrip("!&").startswith("~"):
        parts = _OLD_STYLE_TERM.findall(pattern)
    else:
        parts = [pattern]
    return [p.strip() for p in parts if p.strip()]


def _matcher(term: str, pattern: str) -> Callable[[str], bool]:
    if term.startswith("~"):
        try:
            regex = re.compile(term[1:])
        except re.error as exc:
            raise InputError(
                f"invalid regex {term[1:]!r} in host pattern {pattern!r}: {exc}"
            ) from None
    else:
        regex = re.compile(fnmatch.translate(term))
    return lambda name: regex.match(name) is not None


def _is_named(term: str) -> bool:
    """A term that names one group or host (no glob, regex or subscript)."""
    return not term.startswith("~") and not any(c in term for c in "?*[")


def _match_term(inventory: Inventory, term: str, pattern: str) -> list[str]:
    subscript: tuple[int, int | None] | None = None
    match = None if term.startswith("~") else _SUBSCRIPT.match(term)
    if match is not None:
        term = match.group(1)
        if match.group(2) is not None:
            subscript = (int(match.group(2)), None)
        else:
            start = int(match.group(3) or 0)
            end = int(match.group(4)) if match.group(4) else -1
            subscript = (start, end)
    if term in ("all", "*"):
        hosts = list(inventory.group_members("all"))
    elif term in inventory.hosts and term not in inventory.groups:
        hosts = [term]
    else:  # as Ansible: each matching group's hosts in group order, then matching hosts
        matches = _matcher(term, pattern)
        members: dict[str, None] = {}
        groups = [g for g in inventory.groups if matches(g)]
        for group in groups:
            members.update(dict.fromkeys(inventory.group_members(group)))
        if not groups or term.startswith("~") or any(c in term for c in _HOST_MATCH_CHARS):
            members.update(dict.fromkeys(h for h in inventory.hosts if matches(h)))
        hosts = list(members)
    if subscript is None:
        return hosts
    start, stop = subscript
    if stop is None:
        return [hosts[start]] if -len(hosts) <= start < len(hosts) else []
    last = len(hosts) - 1 if stop == -1 else stop
    return hosts[start : last + 1]


def _evaluate(inventory: Inventory, pattern: str) -> tuple[list[str], list[str]]:
    """The selected hosts, and the named terms that matched nothing."""
    terms = split_pattern(pattern)
    plain = [t for t in terms if not t.startswith(("!", "&"))]
    intersect = [t[1:] for t in terms if t.startswith("&")]
    exclude = [t[1:] for t in terms if t.startswith("!")]
    unmatched: list[str] = []

    def term_hosts(term: str) -> list[str]:
        found = _match_term(inventory, term, pattern)
        if not found and _is_named(term) and term not in ("all", "*"):
            unmatched.append(term)
        return found

    # Ansible's order: the plain terms' hosts as they come, then narrowed by & and !
    selected: dict[str, None] = {}
    for term in plain or ["all"]:
        selected.update(dict.fromkeys(term_hosts(term)))
    for term in intersect:
        keep = set(term_hosts(term))
        selected = {h: None for h in selected if h in keep}
    for term in exclude:
        drop = set(term_hosts(term))
        selected = {h: None for h in selected if h not in drop}
    return list(selected), unmatched


def select_hosts(inventory: Inventory, pattern: str) -> list[str]:
    """The hosts `pattern` selects, in Ansible's order (possibly none)."""
    return _evaluate(inventory, pattern)[0]


def _listing(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "") or "none"


def select_hosts_checked(
    inventory: Inventory,
    pattern: str,
    *,
    location: SourceLocation | None = None,
    key_path: str | None = None,
) -> list[str]:
    """As `select_hosts`, but an InputError when nothing matches or a named term matches nothing.

    A misspelt name in `gpu01,gpu2` would otherwise silently narrow the run.
    """
    try:
        hosts, unmatched = _evaluate(inventory, pattern) if pattern.strip() else ([], [])
    except InputError as exc:  # a bad `~regex` term: said at the pattern's own place
        exc.location = exc.location or location
        exc.key_path = exc.key_path or key_path
        raise
    groups = [g for g in inventory.groups if g not in ("all", "ungrouped")]
    known = f"known groups: {_listing(groups)}; hosts: {_listing(list(inventory.hosts))}"
    if hosts and not unmatched:
        return hosts
    names = [*inventory.groups, *inventory.hosts]
    hint = None
    for term in unmatched:
        close = difflib.get_close_matches(term, names, n=1, cutoff=0.6)
        if close:
            hint = f"did you mean {close[0]!r}?"
            break
    if hosts:
        message = f"{unmatched[0]!r} in pattern {pattern!r} names no group or host ({known})"
    else:
        message = f"pattern {pattern!r} matches no host ({known})"
    raise InputError(message, location=location, key_path=key_path, hint=hint)


class LimitFile(str):
    """`--limit @FILE`: its lines joined as one pattern, and where they came from.

    Messages about it name the file and a line number, never a line: any file can be named
    (`--limit @/etc/shadow`), and its lines are not ours to print.
    """

    path: Path
    lines: list[tuple[int, str]]

    @classmethod
    def of(cls, path: Path, lines: list[tuple[int, str]]) -> LimitFile:
        """The pattern of `lines` ((number, text) pairs) read from `path`."""
        made = cls(",".join(text for _, text in lines))
        made.path = path
        made.lines = lines
        return made


def check_limit(limit: str | None, inventory: Inventory) -> None:
    """For `--limit @FILE`: each line must name a host of `inventory`; said by line number."""
    if not isinstance(limit, LimitFile):
        return
    for number, text in limit.lines:
        try:
            hosts = select_hosts(inventory, text)
        except InputError:  # a bad `~regex` term: its message would quote the line
            hosts = []
        if not hosts:
            raise InputError(
                f"line {number} matches no host of the inventory "
                f"({len(inventory.hosts)} host(s): {', '.join(list(inventory.hosts)[:8])})",
                key_path=f"--limit @{limit.path}",
                hint="a limit file holds one host name or pattern per line",
            )
