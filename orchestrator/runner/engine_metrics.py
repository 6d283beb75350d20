"""The engine's own Prometheus /metrics, scraped during each measured repeat.

Host side (Python 3.8, standard library only). `Scraper(spec).start(folder)` scrapes once at
once (the repeat's first sample, before its bench starts), then every `interval` seconds in a
thread; `stop()` scrapes a last time (after the bench ended), writes every sample to
`FOLDER/engine_metrics.jsonl` and returns its account for exit.json. A sample is one line:

    {"t": 1764599723.123, "text": "# TYPE vllm:kv_cache_usage_perc gauge\\n..."}
    {"t": 1764599724.125, "error": "HTTP 404"}

The text is the server's exposition as it answered, cut to the lines of the families the cell
names (`families`: HELP, TYPE and the family's own samples, `_total` for counters): it stays
Prometheus text, which the controller parses with prometheus_client (analyze/engine_metrics.py);
nothing is parsed here. Bounded: at `max_samples` every other sample is dropped and the interval
doubled, so a long repeat is kept whole at a coarser step. Never raises: the engine's metrics
must never fail a cell.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, List, Optional

from orchestrator.runner.layout import ENGINE_METRICS_JSONL
from orchestrator.runner.protocol import now
from orchestrator.runner.server import http_get

DEFAULT_INTERVAL_S = 1.0
MAX_SAMPLES = 600  # per repeat; then every other one goes and the interval doubles
SCRAPE_TIMEOUT_S = 5.0
MAX_TEXT = 1 << 20  # bytes of one sample's kept text; beyond it the sample is cut and said


def kept_text(text: str, families: Optional[List[str]]) -> str:
    """The exposition's lines of `families` (HELP/TYPE lines and samples named FAMILY or
    FAMILY_total); every line when `families` is empty or None."""
    if not families:
        return text
    names = set()
    for family in families:
        names.add(family)
        names.add(family + "_total")
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] in names:
                out.append(line)
            continue
        name = line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""
        if name in names:
            out.append(line)
    return "\n".join(out) + ("\n" if out else "")


class Scraper:
    """One measured repeat's scrapes of the engine's /metrics."""

    def __init__(self, spec: Dict[str, Any]) -> None:
        self.url = str(spec.get("url") or "")
        interval = spec.get("interval")
        self.interval_s = DEFAULT_INTERVAL_S
        if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval > 0:
            self.interval_s = float(interval)
        families = spec.get("families")
        self.families = [str(f) for f in families] if isinstance(families, list) else None
        limit = spec.get("max_samples")
        self.max_samples = int(limit) if isinstance(limit, int) and limit >= 4 else MAX_SAMPLES
        self.samples: List[Dict[str, Any]] = []
        self.thinned = 0
        self.errors = 0
        self.last_error: Optional[str] = None
        self.folder: Optional[str] = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def scrape(self) -> Dict[str, Any]:
        """One sample now: the kept text, or what went wrong."""
        t = now()
        status, body, error = http_get(self.url, SCRAPE_TIMEOUT_S)
        if status != 200:
            why = error or "HTTP %s" % status
            return {"t": round(t, 3), "error": why}
        text = kept_text(body.decode("utf-8", "replace"), self.families)
        sample: Dict[str, Any] = {"t": round(t, 3), "text": text[:MAX_TEXT]}
        if len(text) > MAX_TEXT:
            sample["cut"] = len(text)
        return sample

    def _keep(self, sample: Dict[str, Any]) -> None:
        with self._lock:
            if "error" in sample:
                self.errors += 1
                self.last_error = str(sample["error"])
            if len(self.samples) >= self.max_samples:
                self.samples = self.samples[::2]  # the first stays: the repeat's start
                self.interval_s *= 2
                self.thinned += 1
            self.samples.append(sample)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._keep(self.scrape())

    def start(self, folder: str) -> None:
        """The first sample now, then one every interval until `stop`."""
        self.folder = folder
        self._keep(self.scrape())
        self._thread = threading.Thread(target=self._run, name="engine-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> Dict[str, Any]:
        """The last sample (the repeat's end), the samples written; the account for exit.json."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(SCRAPE_TIMEOUT_S + 1.0)
        last = self.scrape()
        with self._lock:
            self.samples.append(last)  # past the bound by one: the end is never thinned away
            if "error" in last:
                self.errors += 1
                self.last_error = str(last["error"])
            samples = list(self.samples)
        info: Dict[str, Any] = {
            "file": ENGINE_METRICS_JSONL,
            "url": self.url,
            "samples": len(samples),
            "interval_s": self.interval_s,
        }
        if self.thinned:
            info["thinned"] = self.thinned
        if self.errors:
            info.update(errors=self.errors, last_error=self.last_error)
        if self.folder is None:
            return info
        try:
            path = os.path.join(self.folder, ENGINE_METRICS_JSONL)
            with open(path + ".tmp", "w", encoding="utf-8") as fh:
                for sample in samples:
                    fh.write(json.dumps(sample, ensure_ascii=False) + "\n")
            os.replace(path + ".tmp", path)
        except OSError as exc:
            info["write_error"] = str(exc)
        return info


def start_scraper(spec: Any, folder: str) -> Optional[Scraper]:
    """A started scraper for the cell's `engine_metrics` spec, None when it has none."""
    if not isinstance(spec, dict) or not spec.get("url"):
        return None
    scraper = Scraper(spec)
    scraper.start(folder)
    return scraper
