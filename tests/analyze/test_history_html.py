"""The history dashboard in headless Chromium: it renders every chart and fetches nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_report_html import _chromium, _page_fetches, proxy  # noqa: F401 (the fixture)

CLI = Path(__file__).resolve().parents[1] / "cli"
sys.path.insert(0, str(CLI))
from test_history_cli import _night  # noqa: E402


def test_chromium_renders_the_dashboard_and_fetches_nothing(
    tmp_path: Path,
    proxy: tuple[int, list[bytes]],  # noqa: F811
) -> None:
    chromium = _chromium()
    port, hosts = proxy
    results = tmp_path / "results"
    for i in range(12):
        _night(results, i, 94.0 if i < 7 else 62.0)
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "history", "--format", "html", "-o",
         str(tmp_path / "dash"), "--results", str(results)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    page = tmp_path / "dash" / "index.html"
    argv = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}", "--disable-background-networking",
        f"--proxy-server=http://127.0.0.1:{port}", "--proxy-bypass-list=<-loopback>",
        "--dump-dom", f"--screenshot={tmp_path / 'shot.png'}", "--window-size=1000,900",
        page.as_uri(),
    ]  # fmt: skip
    dom = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path).stdout
    assert dom.rstrip().endswith("</html>") and "written by orch history" in dom
    assert dom.count("<svg") == 1 and dom.count("<circle") == 12
    assert (tmp_path / "shot.png").read_bytes().startswith(b"\x89PNG")
    assert _page_fetches(hosts) == []
