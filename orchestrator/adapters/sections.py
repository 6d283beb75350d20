"""Reading a rendered playbook section into a spec: typed fields with their key paths, the
server's URLs, readiness checks, captures, and the fields every server or bench shares."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from orchestrator.adapters.flags import scalar_text
from orchestrator.cell import Capture, ReadyCheck, ServerSpec
from orchestrator.errors import InputError, is_known_secret

# Hosts a server binds to that are not addresses a client can connect to.
_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}


def as_mapping(value: Any, key_path: str) -> dict[str, Any]:
    """`value` as a dict (None -> {}), or an InputError naming `key_path`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"expected a mapping, got {type(value).__name__}", key_path=key_path)
    return {str(k): v for k, v in value.items()}


def split_command(value: Any, key_path: str) -> list[str]:
    """argv from a list of scalars, or from a string split like a shell would (no shell runs)."""
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise InputError(f"cannot split command: {exc}", key_path=key_path) from None
    elif isinstance(value, list | tuple):
        argv = []
        for i, item in enumerate(value):
            if isinstance(item, dict | list | tuple) or item is None:
                raise InputError(
                    f"argv items must be scalars, got {type(item).__name__}",
                    key_path=f"{key_path}[{i}]",
                )
            argv.append(scalar_text(item))
    else:
        raise InputError(
            f"expected a string or a list, got {type(value).__name__}", key_path=key_path
        )
    if not argv:
        raise InputError("command is empty", key_path=key_path)
    return argv


def _quoted(value: Any) -> str:
    """`value` as a message quotes it: a secret's value (one from a secret-named variable)
    is named as such, never shown."""
    return "a secret value" if is_known_secret(str(value)) else repr(value)


def get_int(section: Mapping[str, Any], key: str, default: int | None, key_path: str) -> int | None:
    """An integer setting (a digit string is accepted: rendering may give one)."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        raise InputError("expected an integer, got a boolean", key_path=key_path)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise InputError(f"expected an integer, got {_quoted(value)}", key_path=key_path)


def get_port(
    section: Mapping[str, Any], key: str, default: int | None, key_path: str
) -> int | None:
    """A TCP port setting: an integer from 1 to 65535 (a digit string is accepted)."""
    port = get_int(section, key, default, key_path)
    if port is not None and not 0 < port < 65536:
        raise InputError(f"expected a port number (1-65535), got {port}", key_path=key_path)
    return port


def get_float(
    section: Mapping[str, Any], key: str, default: float | None, key_path: str
) -> float | None:
    """A float setting (ints and numeric strings accepted)."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        raise InputError("expected a number, got a boolean", key_path=key_path)
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise InputError(f"expected a number, got {_quoted(value)}", key_path=key_path) from None
    if not math.isfinite(result) or result < 0:
        raise InputError(f"expected a finite number >= 0, got {_quoted(value)}", key_path=key_path)
    return result


def get_str(section: Mapping[str, Any], key: str, default: str | None, key_path: str) -> str | None:
    """A string setting; numbers are accepted and turned into text."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(f"expected a string, got {type(value).__name__}", key_path=key_path)
    return str(value)


def probe_host(host: str | None) -> str:
    """Where a client connects to reach a server bound to `host` (wildcards -> loopback)."""
    if host is None or host.strip() in _WILDCARD_HOSTS:
        return "127.0.0.1"
    host = host.strip()
    if ":" in host and not host.startswith("["):
        return f"[{host}]"  # an IPv6 literal needs brackets in a URL
    return host


def base_url(host: str | None, port: int) -> str:
    """`http://host:port` for a client of a server bound to `host`."""
    return f"http://{probe_host(host)}:{port}"


def server_url(server: ServerSpec | None) -> str | None:
    """`http://host:port` of a server spec: from its ready URL's host, else its args' host."""
    if server is None or server.port is None:
        return None
    host: str | None = None
    if server.ready.url:
        host = urlsplit(server.ready.url).hostname
    if host is None:
        raw = server.args.get("host")
        host = str(raw) if raw is not None else None
    return base_url(host, server.port)


def aimed_url(server: ServerSpec | None, client: str, key_path: str) -> str:
    """The server's `http://host:port` for a bench client, or a located error naming `key_path`."""
    url = server_url(server)
    if url is None:
        raise InputError(
            f"{client} needs a server to aim at",
            key_path=key_path,
            hint=f"add a server: section, or give {key_path}",
        )
    return url


def _join_url(base: str, path: str) -> str:
    if path.startswith(("http://", "https://")):
        return path
    return base + (path if path.startswith("/") else "/" + path)


def build_ready(
    section: Mapping[str, Any],
    *,
    host: str | None,
    port: int | None,
    default_path: str | None = None,
    default_log: str | None = None,
    default_timeout: float = 600.0,
    generate_body: dict[str, Any] | None = None,
) -> ReadyCheck:
    """The readiness check: the adapter's defaults with every key the user wrote on top.

    `url` (a full URL) or `path` (joined to host:port) replaces the default URL; an explicit
    `url: null` / `log: null` turns that half of the check off.
    """
    ready = as_mapping(section.get("ready"), "ready")
    keys = {"url", "path", "status", "log", "timeout", "interval", "from_nodes"}
    if generate_body is not None:
        keys.add("generate")
    unknown = sorted(set(ready) - keys)
    if unknown:
        raise InputError(
            f"unknown key {unknown[0]!r}",
            key_path=f"ready.{unknown[0]}",
            hint=f"ready takes {', '.join(sorted(keys))}"
            + ("" if generate_body is not None else " (generate: with the vllm adapter)"),
        )
    if ready.get("url") is not None and ready.get("path") is not None:
        raise InputError("give ready.url or ready.path, not both", key_path="ready.path")

    url: str | None = None
    path = get_str(ready, "path", None, "ready.path")
    explicit_url = get_str(ready, "url", None, "ready.url")
    if explicit_url is not None:
        url = explicit_url
    elif path is not None:
        if port is None:
            raise InputError(
                "ready.path needs a port to build a URL",
                key_path="ready.path",
                hint="set server.port, or give ready.url",
            )
        url = _join_url(base_url(host, port), path)
    elif "url" not in ready and default_path is not None and port is not None:
        url = _join_url(base_url(host, port), default_path)

    log = get_str(ready, "log", None, "ready.log")
    if log is None and "log" not in ready:
        log = default_log
    if log is not None:
        try:
            re.compile(log)
        except re.error as exc:
            raise InputError(f"invalid regex: {exc}", key_path="ready.log") from None

    status = get_int(ready, "status", 200, "ready.status")
    timeout = get_float(ready, "timeout", default_timeout, "ready.timeout")
    interval = get_float(ready, "interval", 0.5, "ready.interval")
    assert status is not None and timeout is not None and interval is not None
    from_nodes = _from_nodes(section, ready, url)
    generate_url = None
    if generate_body is not None and port is not None:
        wanted = ready.get("generate", True)
        if not isinstance(wanted, bool):
            raise InputError(f"expected true or false, got {wanted!r}", key_path="ready.generate")
        if wanted:
            generate_url = _join_url(base_url(host, port), "/v1/completions")
    return ReadyCheck(
        url=url,
        status=status,
        log=log,
        timeout=timeout,
        interval=interval,
        generate_url=generate_url,
        generate_body=generate_body if generate_url else None,
        from_nodes=from_nodes,
    )


def _from_nodes(section: Mapping[str, Any], ready: Mapping[str, Any], url: str | None) -> bool:
    """`ready.from_nodes`: a multi-node server's other nodes ask its readiness URL too."""
    wanted = ready.get("from_nodes", False)
    if not isinstance(wanted, bool):
        raise InputError(f"expected true or false, got {wanted!r}", key_path="ready.from_nodes")
    if wanted and url is None:
        raise InputError(
            "ready.from_nodes asks the readiness URL from every node, and there is none",
            key_path="ready.from_nodes",
            hint="give ready.path or ready.url, or leave from_nodes out",
        )
    if wanted and node_of(section) is None:
        raise InputError(
            "ready.from_nodes is for a server over several hosts (server.nodes above 1)",
            key_path="ready.from_nodes",
            hint="leave from_nodes out: a one-host server asks its own URL already",
        )
    return wanted


_CAPTURE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def build_captures(
    section: Mapping[str, Any],
    *,
    host: str | None,
    port: int | None,
    default: list[dict[str, Any]] | None = None,
) -> tuple[Capture, ...]:
    """Captures from the section (or the adapter default), with paths made full URLs.

    A path such as `/server_info` becomes `http://127.0.0.1:30000/server_info`, so the runner
    never has to guess the server's address.
    """
    raw = section.get("captures")
    if raw is None:  # not written (or null): the adapter's default; [] means none
        raw = default
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise InputError("expected a list of {name, urls}", key_path="captures")
    captures: list[Capture] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        kp = f"captures[{i}]"
        entry = as_mapping(item, kp)
        name = get_str(entry, "name", None, f"{kp}.name")
        if not name or not _CAPTURE_NAME.match(name):
            raise InputError(
                "a capture needs a name of letters, digits, '-' or '_'", key_path=f"{kp}.name"
            )
        if name in seen:
            raise InputError(f"duplicate capture name {name!r}", key_path=f"{kp}.name")
        seen.add(name)
        urls_raw = entry.get("urls", entry.get("url"))
        urls_list = [urls_raw] if isinstance(urls_raw, str) else urls_raw
        if not isinstance(urls_list, list | tuple) or not urls_list:
            raise InputError("a capture needs urls: [path or URL, ...]", key_path=f"{kp}.urls")
        urls: list[str] = []
        for j, u in enumerate(urls_list):
            if not isinstance(u, str) or not u:
                raise InputError("expected a path or URL", key_path=f"{kp}.urls[{j}]")
            if u.startswith(("http://", "https://")):
                urls.append(u)
            elif port is None:
                raise InputError("a capture path needs a server port", key_path=f"{kp}.urls[{j}]")
            else:
                urls.append(_join_url(base_url(host, port), u))
        captures.append(Capture(name=name, urls=tuple(urls)))
    return tuple(captures)


def common_server_fields(section: Mapping[str, Any]) -> dict[str, Any]:
    """cwd, stop_grace and verify_env, validated, for ServerSpec(**...)."""
    out: dict[str, Any] = {}
    cwd = get_str(section, "cwd", None, "cwd")
    if cwd is not None:
        out["cwd"] = cwd
    grace = get_float(section, "stop_grace", None, "stop_grace")
    if grace is not None:
        out["stop_grace"] = grace
    verify = section.get("verify_env")
    if verify is not None:
        if verify not in ("strict", "warn", "off"):
            raise InputError(f"expected strict, warn or off, got {verify!r}", key_path="verify_env")
        out["verify_env"] = verify
    restart = section.get("restart")
    if node_of(section) is not None:
        # Server sessions are one host's: a server over several hosts starts with each cell.
        restart = "per_cell"
    if restart is not None:
        if restart not in ("per_config", "per_cell"):
            raise InputError(
                f"expected per_config or per_cell, got {restart!r}", key_path="restart"
            )
        out["restart"] = restart
    between = section.get("between")
    if between is not None:
        out["between"] = tuple(split_command(between, "between"))
    return out


def common_bench_fields(section: Mapping[str, Any]) -> dict[str, Any]:
    """warmup, repeats, timeout, regex metrics and cache, validated, for BenchSpec(**...)."""
    out: dict[str, Any] = {}
    warmup = get_int(section, "warmup", None, "warmup")
    if warmup is not None:
        out["warmup"] = warmup
    given = section.get("repeats")
    # the sequential form's `max` bounds the count; plan/repeats.py makes the rule of the rest
    repeats = (
        get_int(given, "max", None, "repeats.max")
        if isinstance(given, Mapping)
        else get_int(section, "repeats", None, "repeats")
    )
    if repeats is not None:
        if repeats < 1:
            raise InputError("repeats must be at least 1", key_path="repeats")
        out["repeats"] = repeats
    starts = get_int(section, "starts", None, "starts")
    if starts is not None:
        if starts < 1:
            raise InputError("starts must be at least 1", key_path="starts")
        out["starts"] = starts
    timeout = get_float(section, "timeout", None, "timeout")
    if timeout is not None:
        out["timeout"] = timeout
    out["metrics"] = regex_metrics(section.get("metrics"))
    cache = section.get("cache")
    if cache is not None:
        if cache not in BENCH_CACHE:
            raise InputError(
                f"cache must be one of {', '.join(BENCH_CACHE)}, not {cache!r}",
                key_path="cache",
                hint="fresh: each run sends prompts of its own; warm: the same prompts each run",
            )
        out["cache"] = cache
    return out


# bench.cache: what the engine's prefix cache holds for a measured run (cell.py BenchSpec)
BENCH_CACHE = ("fresh", "warm")


def prompts_text(args: Mapping[str, Any], dataset: str) -> str:
    """`24 random prompts`: --num-prompts (default 1000) of --dataset-name (`dataset`)."""
    count = args.get("num-prompts", 1000)
    return f"{count} {args.get('dataset-name', dataset)} prompts"


def regex_metrics(value: Any) -> dict[str, str]:
    """`metrics: {name: regex}`, each regex compiled once here so bad ones fail early."""
    metrics = as_mapping(value, "metrics")
    for name, pattern in metrics.items():
        if not isinstance(pattern, str):
            raise InputError("expected a regex string", key_path=f"metrics.{name}")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InputError(f"invalid regex: {exc}", key_path=f"metrics.{name}") from None
    return {k: str(v) for k, v in metrics.items()}


def node_of(section: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The node variables of a server over several hosts (plan/nodes.py), else None."""
    node = section.get("node")
    if isinstance(node, Mapping) and int(node.get("nnodes", 1)) > 1:
        return node
    return None
