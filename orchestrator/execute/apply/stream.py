"""Cell archives that arrive inside the runner's stdout, put back together.

The runner sends each finished cell's archive after its `done` event as `archive` (size),
`archive_data` (base64) and `archive_end` (sha256) lines (`runner/cell_queue.py`): no file transfer,
no SFTP. `ArchiveStream` puts those lines back together into a file and checks it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path
from typing import Any

ARCHIVE_EVENTS = ("archive", "archive_data", "archive_end")
MAX_ARCHIVE_BYTES = 64 << 30  # one cell's archive: far above any real cell's logs


class ArchiveStream:
    """Reassembles streamed archives into files under `directory`, one cell at a time."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._open: dict[str, tuple[Any, Any, dict[str, Any]]] = {}

    def feed(self, event: dict[str, Any]) -> tuple[str, Path | str] | None:
        """Take one archive line; (cell id, the archive's path or why it is unusable) once a
        cell's archive is complete, else None."""
        cell = str(event.get("cell") or "")
        kind = event.get("event")
        if kind == "archive":
            if event.get("error"):
                return cell, f"the runner could not read the archive: {event['error']}"
            size = event.get("bytes")
            if not isinstance(size, int) or not 0 <= size <= MAX_ARCHIVE_BYTES:
                return cell, f"the runner declared an archive of {size!r} bytes: refused"
            path = (
                self.directory
                / f"{len(self._open)}-{hashlib.sha256(cell.encode()).hexdigest()[:12]}.tar.gz"
            )
            self._open[cell] = (path.open("wb"), hashlib.sha256(), dict(event, local=path))
            return None
        if cell not in self._open:
            return None
        fh, digest, head = self._open[cell]
        if kind == "archive_data":
            try:
                chunk = base64.b64decode(str(event.get("data") or ""), validate=True)
            except (binascii.Error, ValueError):
                fh.close()
                del self._open[cell]
                return cell, "a streamed archive chunk is not base64"
            head["written"] = head.get("written", 0) + len(chunk)
            if head["written"] > head["bytes"]:  # stopped at once, not after the whole stream
                fh.close()
                del self._open[cell]
                head["local"].unlink(missing_ok=True)
                return cell, f"the streamed archive passed its declared {head['bytes']} bytes"
            fh.write(chunk)
            digest.update(chunk)
            return None
        fh.close()
        del self._open[cell]
        size = head["local"].stat().st_size
        # the sha256 comes with the end (the runner hashes as it reads) or, older, the head
        want = event.get("sha256") or head.get("sha256")
        if size != head.get("bytes") or digest.hexdigest() != want:
            return cell, (
                f"the streamed archive is damaged ({size} of {head.get('bytes')} bytes, "
                "sha256 mismatch)"
            )
        return cell, Path(head["local"])

    def close(self) -> None:
        """Close the files of archives that never ended (a lost connection)."""
        for fh, _digest, _head in self._open.values():
            fh.close()
        self._open.clear()
