"""What a host sends cannot grow the controller without bound (issue 23, items 6 and 9): a
streamed command keeps only its output's tail, a line past the cap is dropped and said, a long
line is put together in linear work, and an archive stops at its declared size."""

from __future__ import annotations

import base64
from pathlib import Path

from orchestrator.execute.apply.stream import ArchiveStream
from orchestrator.execute.transport.base import STREAMED_TAIL_BYTES, LineSplitter


def test_a_streamed_output_keeps_only_its_tail_and_every_line_is_handed_over() -> None:
    lines: list[str] = []
    split = LineSplitter(lines.append)
    block = (b"x" * 1023 + b"\n") * 1024  # 1 MiB of 1 KiB lines
    for _ in range(8):
        split.feed(block)
    assert len(lines) == 8 * 1024
    kept = split.finish()
    assert STREAMED_TAIL_BYTES <= len(kept) <= STREAMED_TAIL_BYTES + len(block)


def test_without_a_callback_the_whole_output_is_returned() -> None:
    split = LineSplitter(None)
    for _ in range(3):
        split.feed(b"y" * (1 << 20))
    assert len(split.finish()) == 3 << 20


def test_a_line_past_the_cap_is_dropped_said_and_the_next_one_arrives() -> None:
    lines: list[str] = []
    split = LineSplitter(lines.append, max_line=1000)
    for _ in range(50):  # one line of 50 000 bytes, in pieces, as a pipe gives it
        split.feed(b"z" * 1000)
    split.feed(b"\nafter\npartial")
    split.finish()
    assert lines == ["orch: dropped a line longer than 1000 bytes", "after", "partial"]
    assert split.dropped == 1


def test_a_long_line_in_many_pieces_arrives_whole() -> None:
    lines: list[str] = []
    split = LineSplitter(lines.append)
    piece = b"a" * 4096
    for _ in range(2048):  # 8 MiB: the quadratic join took over a second here
        split.feed(piece)
    split.feed(b"\n")
    assert [len(line) for line in lines] == [8 << 20]


def test_an_archive_stops_at_its_declared_size(tmp_path: Path) -> None:
    stream = ArchiveStream(tmp_path)
    assert stream.feed({"event": "archive", "cell": "c", "bytes": 10}) is None
    chunk = base64.b64encode(b"b" * 65536).decode()
    got = stream.feed({"event": "archive_data", "cell": "c", "data": chunk})
    assert got == ("c", "the streamed archive passed its declared 10 bytes")
    assert list(tmp_path.iterdir()) == []  # nothing kept of it
    # the rest of that stream is ignored, never written
    assert stream.feed({"event": "archive_data", "cell": "c", "data": chunk}) is None


def test_an_absurd_declared_size_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    stream = ArchiveStream(tmp_path)
    for size in (-1, 1 << 60, "many"):
        got = stream.feed({"event": "archive", "cell": "c", "bytes": size})
        assert got is not None and "refused" in str(got[1])
    assert list(tmp_path.iterdir()) == []
