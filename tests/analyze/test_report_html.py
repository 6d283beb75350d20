"""`orch report --format html`: one self-contained file with the tables (units), the plots
inline, every cell's status and reason, and a diff when asked; rendered by a real headless
Chromium with every page fetch caught (issue 16 item 9)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from analyze_fixtures import base_cell, write_run
from test_report_sweep import sweep_run

from orchestrator.analyze.report.html import NO_MATPLOTLIB, render_html, report_figures
from orchestrator.analyze.report.tables import load_report

HOSTILE = '<script>alert(1)</script><img src="http://evil.example/x.png">'


class _Tags(HTMLParser):
    """Every tag of a page with its attributes, and the text of its <style> elements."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.style = ""
        self._in_style = False
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data


def external_references(page: str) -> list[str]:
    """Whatever a browser would fetch: a src/href/... that is not inline data or a fragment,
    a CSS url() or @import."""
    parsed = _Tags(page)
    found = [
        f"<{tag} {name}={value}>"
        for tag, attrs in parsed.tags
        for name, value in attrs.items()
        if name in ("src", "href", "action", "poster", "srcset", "data", "background")
        and not (value or "").startswith(("data:", "#"))
    ]
    found += [
        tag for tag, _ in parsed.tags if tag in ("script", "iframe", "object", "embed", "link")
    ]
    found += re.findall(r"url\((?!\s*['\"]?data:)[^)]*\)|@import", parsed.style)
    return found


def _run(tmp_path: Path) -> Path:
    """The sweep of test_report_sweep plus a failed cell whose reason and axis are hostile."""
    run = sweep_run(tmp_path)
    bad = base_cell("broken-0000", axes={"spec": "x<b>y</b>", "max_concurrency": 1})
    extra = write_run(tmp_path / "extra", "x", [{"cell": bad, "status": "failed",
                                               "reason": f"server died\n{HOSTILE}"}])  # fmt: skip
    shutil.move(extra / "cells" / "broken-0000", run / "cells" / "broken-0000")
    doc = json.loads((run / "run.json").read_text())  # and one cell that never got to run
    doc["cells"]["ghost-0000"] = {"host": "gpu02", "status": "not run", "reason": "interrupted"}
    (run / "run.json").write_text(json.dumps(doc))
    return run


def _orch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`orch report ARGS` where matplotlib cannot be imported (fast, and the tables-only path)."""
    hidden = tmp_path / "no-matplotlib" / "matplotlib"
    hidden.mkdir(parents=True, exist_ok=True)
    (hidden / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    argv = [sys.executable, "-m", "orchestrator", "report", *args]
    env = {**os.environ, "PYTHONPATH": str(hidden.parent)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def test_the_page_is_self_contained_escaped_and_names_every_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if orch[plot] were not installed
    rep = load_report(_run(tmp_path), baseline="spec=off")
    figures, note = report_figures(rep, "max_concurrency", None)
    assert figures == [] and note == NO_MATPLOTLIB
    page = render_html(rep, figures=figures, plot_note=note, diff=("diff a vs b", "x < y"))
    assert external_references(page) == []
    hostile_page = (
        render_html(rep)
        + f'<img src="{tmp_path}/x.png"><style>a {{ background: url(//x) }}</style>'
    )
    assert len(external_references(hostile_page)) == 2  # the check sees what it must refuse
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "spec=x&lt;b&gt;y&lt;/b&gt;" in page
    for row in rep.rows:
        assert f'id="cell-{row.cell.id}"' in page
    assert '<tr id="cell-ghost-0000"><td><code>ghost-0000</code></td><td>gpu02</td>' in page
    assert '<td class="not run">not run</td><td><pre>interrupted</pre>' in page
    assert '<td class="failed">failed (at ready)</td>' in page
    assert "output_throughput\ntok/s" in page and "Δ%" in page  # units and the baseline
    assert html.escape(NO_MATPLOTLIB) in page and "<pre>x &lt; y</pre>" in page


def test_the_cli_writes_html_with_a_diff_and_refuses_a_diff_in_tidy_formats(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path)
    out = tmp_path / "report.html"
    res = _orch(
        tmp_path, str(run), "--format", "html", "-o", str(out), "--diff", "off-c1-", "eagle-c1-"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == "" and f"report: {out}" in res.stderr
    page = out.read_text()
    assert '<section id="diff"><h2>diff off-c1- vs eagle-c1-</h2>' in page
    assert '<section id="sweep">' in page and "★" in page
    assert "<img" not in page and html.escape(NO_MATPLOTLIB) in page
    refused = _orch(tmp_path, str(run), "--format", "csv", "--diff", "off-c1-", "eagle-c1-")
    assert refused.returncode == 2 and "--diff has no place in tidy csv" in refused.stderr


# --- a real browser ---------------------------------------------------------------------------

# Chromium's own services (clock, updates, sign-in) it calls on start whatever the page: every
# other host asked of the proxy is a fetch by the page.
_CHROMIUM_OWN = (".google.com", ".googleapis.com", ".gvt1.com", ".gstatic.com")
_REQUEST_HOST = re.compile(rb"^[A-Z]+ (?:https?://)?([^/:\s]+)")


def _chromium() -> str:
    found = shutil.which("chromium")
    if found:
        return found
    if os.environ.get("CI") == "true" and os.geteuid() == 0:  # scripts/test.sh installs it
        pytest.fail("chromium is missing: scripts/test.sh installs it when run as root")
    pytest.skip("needs chromium (apt-get install chromium; scripts/test.sh does as root)")


@pytest.fixture
def proxy() -> Iterator[tuple[int, list[bytes]]]:
    """A proxy that answers nothing and records the host of every request sent to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(32)
    server.settimeout(0.1)
    hosts: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    request = conn.recv(4096)
                except OSError:
                    continue
                if not request:  # a socket Chromium opened ahead (preconnect) and closed unused
                    continue
                found = _REQUEST_HOST.match(request)
                hosts.append(found.group(1) if found else b"?")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], hosts
    stop.set()
    thread.join()
    server.close()


def _page_fetches(hosts: list[bytes]) -> list[str]:
    return [h.decode() for h in hosts if not h.decode().endswith(_CHROMIUM_OWN)]


def test_headless_chromium_renders_every_cell_and_fetches_nothing(
    tmp_path: Path, proxy: tuple[int, list[bytes]]
) -> None:
    chromium = _chromium()
    port, hosts = proxy
    run = _run(tmp_path)
    rep = load_report(run)
    figures, note = report_figures(rep, "max_concurrency", None)  # the PNGs when orch[plot] is in
    page = tmp_path / "report.html"
    page.write_text(render_html(rep, figures=figures, plot_note=note))

    def browse(target: Path, *mode: str) -> subprocess.CompletedProcess[str]:
        argv = [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}", "--disable-background-networking",
            f"--proxy-server=http://127.0.0.1:{port}", "--proxy-bypass-list=<-loopback>",
            *mode, target.as_uri(),
        ]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)

    shot = tmp_path / "shot.png"
    dom = browse(page, "--dump-dom", f"--screenshot={shot}", "--window-size=1200,1600").stdout
    assert dom.rstrip().endswith("</html>") and "written by orch report" in dom
    listed = json.loads((run / "run.json").read_text())["cells"]
    for cell in {*listed, *(c.name for c in (run / "cells").iterdir())}:
        assert f'id="cell-{cell}"' in dom, cell
    assert "Cells: 6 of 8 passed" in dom and "alert(1)" in dom and "<script" not in dom
    assert dom.count("<img ") == len(figures)
    assert shot.read_bytes().startswith(b"\x89PNG")
    assert _page_fetches(hosts) == []
    # the proxy does catch a page's fetch: the same browser on a page with an external image
    leaky = tmp_path / "leaky.html"
    leaky.write_text('<html><body><img src="http://report-fetch.invalid/x.png"></body></html>')
    browse(leaky, "--dump-dom")
    assert _page_fetches(hosts) == ["report-fetch.invalid"]
