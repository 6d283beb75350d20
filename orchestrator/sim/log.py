"""The simulated server's log lines: SGLang's timestamped shape, one stream, thread-safe."""

from __future__ import annotations

import datetime as dt
import threading
from typing import TextIO


class Logger:
    """SGLang-style timestamped lines on one stream, flushed as they are written."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, message: str, tag: str = "") -> None:
        stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        prefix = f"[{stamp}{' ' + tag if tag else ''}] "
        with self.lock:
            self.stream.write(prefix + message + "\n")
            self.stream.flush()
