"""Cell ids: canonical JSON of a rendered cell, secret values masked, hashed behind a slug.

The same playbook gives the same ids in every run and on every machine, so resume, diff and
history pair cells by id; `orchestrator.cell` re-exports these for its readers. A secret's
value is hashed as its name's placeholder `<secret:NAME>` wherever it appears: an id neither
changes when a token rotates nor carries (or serves as an oracle for) the value.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from orchestrator.container_pin import without_container_pin
from orchestrator.runner.redaction import is_secret_name


def secret_placeholder(name: str) -> str:
    """What a cell id hashes in place of the value of secret `name`."""
    return f"<secret:{name}>"


def secret_masks(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """{value: name} from (name, value) pairs; a value under two names gets the first in order."""
    masks: dict[str, str] = {}
    for name, value in sorted(pairs):
        if value:
            masks.setdefault(value, name)
    return masks


MIN_MASKED_SUBSTRING = 4  # as redaction's MIN_SECRET_LENGTH: shorter values only as whole strings


@lru_cache(maxsize=256)
def _mask_pattern(masks: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str], dict[str, str]]:
    replace: dict[str, str] = {}
    for value, name in masks:
        escaped = json.dumps(value, ensure_ascii=False)  # as canonical_json writes it
        if len(value) >= MIN_MASKED_SUBSTRING:
            replace.setdefault(escaped[1:-1], secret_placeholder(name))
        else:
            replace.setdefault(escaped, json.dumps(secret_placeholder(name)))
    alternatives = sorted(replace, key=lambda t: (-len(t), t))  # longest first: no partial hits
    return re.compile("|".join(re.escape(t) for t in alternatives)), replace


def mask_secrets(text: str, masks: Mapping[str, str]) -> str:
    """Canonical JSON `text` with each secret value (`masks`: value -> name) as its placeholder.

    One pass, so a placeholder is never masked again. A value of `MIN_MASKED_SUBSTRING`
    characters or more is replaced wherever it appears (inside an argv item or a URL); a shorter
    one only where it is a whole JSON string (masking every "1" would hide unrelated numbers).
    """
    if not masks:
        return text
    pattern, replace = _mask_pattern(tuple(sorted(masks.items())))
    return pattern.sub(lambda m: replace[m.group(0)], text)


# Not in a cell id: how and when the ref was resolved, and how the host may find it.
_REPO_PIN_NOT_HASHED = ("fetch", "requested", "resolved_at", "resolved_by")


def repo_id_data(repo: Mapping[str, Any]) -> dict[str, Any]:
    """What a cell id hashes of a repo pin: the ref as requested, never the SHA a run pinned it
    to, so the same playbook gives the same id in every run (resume and diff pair by id)."""
    data = {k: v for k, v in repo.items() if k not in _REPO_PIN_NOT_HASHED}
    if repo.get("requested") is not None:
        data["version"] = repo["requested"]
    return data


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no whitespace: the same data always gives the same text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def slug_part(value: Any) -> str:
    """One axis value as a short, filesystem-safe piece of a cell id."""
    if isinstance(value, dict | list):
        value = canonical_json(value)
    text = _SLUG_BAD.sub("-", str(value)).strip("-.")
    return text[:24] or "x"


def _mask_env(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """`spec` with the env values of its `secrets` names as placeholders."""
    secrets = set(spec.get("secrets") or ())
    env = spec.get("env")
    if not secrets or not isinstance(env, Mapping) or not secrets.intersection(env):
        return spec
    masked = {k: (secret_placeholder(k) if k in secrets else v) for k, v in env.items()}
    return {**spec, "env": masked}


@lru_cache(maxsize=1024)
def _key_order(keys: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    """(index, key's JSON with ':') in canonical order; planning asks for the same keys often."""
    return tuple(
        (i, canonical_json(keys[i]) + ":") for i in sorted(range(len(keys)), key=keys.__getitem__)
    )


def entries_text(entries: Mapping[str, str]) -> str:
    """A mapping's canonical JSON without its braces, from the canonical JSON of each value."""
    return keyed_text(tuple(entries), list(entries.values()))


def keyed_text(keys: tuple[str, ...], texts: Sequence[str]) -> str:
    """`entries_text` of `keys` with `texts[i]` the canonical JSON of the value of `keys[i]`."""
    return ",".join([key + texts[i] for i, key in _key_order(keys)])


def spec_id_text(
    host_text: str, axes_text: str, rest_text: str, masks: Mapping[str, str] | None = None
) -> str:
    """`[host, spec]` as canonical JSON from its pieces, for a spec whose first key is `axes`.

    `host_text` and `axes_text` are canonical JSON, `rest_text` the spec's other entries
    (`entries_text`); `masks` (value -> name) are masked in those entries only: axis values are
    declared data, and two points must never share an id.
    """
    head = "[" + host_text + ',{"axes":' + axes_text
    if not rest_text:
        return head + "}]"
    return head + "," + mask_secrets(rest_text + "}", masks or {}) + "]"


def cell_id_text(host: str, spec: Any, masks: Mapping[str, str] | None = None) -> str:
    """What a cell id hashes: `[host, spec]` as canonical JSON, secret values as placeholders.

    Env values of the spec's `secrets` names are masked by name; `masks` (value -> name, e.g.
    the rendered values of secret vars) are masked wherever they appear in the spec, except in
    `axes` (`spec_id_text`).
    """
    if isinstance(spec, Mapping):
        spec = _mask_env(spec)
        if isinstance(spec.get("repo"), Mapping):
            spec = {**spec, "repo": repo_id_data(spec["repo"])}
        spec = without_container_pin(spec)
    if not isinstance(spec, Mapping) or "axes" not in spec or min(spec) != "axes":
        return mask_secrets(canonical_json([host, spec]), masks or {})
    rest = {k: canonical_json(v) for k, v in spec.items() if k != "axes"}
    return spec_id_text(
        canonical_json(host), canonical_json(spec["axes"]), entries_text(rest), masks
    )


def id_from_text(slug_parts: Iterable[str], text: str) -> str:
    """A cell id: the slug of its axis values, then a short hash of `text` (`cell_id_text`)."""
    slug = "-".join(slug_parts) or "cell"
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{slug[:80]}-{digest}"


def cell_id(
    axes: dict[str, Any], host: str, spec: Any, masks: Mapping[str, str] | None = None
) -> str:
    """A readable slug of the axis values plus a short hash of the rendered spec.

    `spec` is everything that defines the cell except its id (canonical JSON is hashed), so the
    same cell gets the same id in every run and on every machine. Secret values are hashed as
    placeholders (`cell_id_text`): an id neither changes when a token is rotated nor serves as
    an offline oracle for guessing one.
    """
    listed = spec.get("secrets") if isinstance(spec, Mapping) else None
    return id_from_text(axis_slugs(axes, listed or ()), cell_id_text(host, spec, masks))


SECRET_SLUG = "secret"


def axis_slugs(axes: Mapping[str, Any], listed: Iterable[str]) -> list[str]:
    """The slug parts of a point's axis values; the value of an axis whose name is secret (or
    listed under `secrets:`) never shows in an id: its part is `secret`."""
    names = set(listed)
    return [SECRET_SLUG if is_secret_name(k, names) else slug_part(v) for k, v in axes.items()]
