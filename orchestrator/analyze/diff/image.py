"""The image section of `orch diff`: which container image each cell's server ran (its
reference as written and the digest it was pinned to), the image's labels and runtime, and
what was read inside it (`snapshot.image.json`, kept in server.json's container record):
Python, torch's and the engine's versions, and the packages that differ."""

from __future__ import annotations

from typing import Any

from orchestrator.analyze.diff.model import SECTION_TITLES, Block, Entry, Section, as_dict, same
from orchestrator.analyze.evidence import CellEvidence

SHORT_DIGEST = 12  # hex digits of a digest shown beside the reference, as a commit's


def container_of(cell: CellEvidence) -> dict[str, Any]:
    """The server's container as it ran (server.json), else as planned (cell.json); {} for a
    server on the host."""
    ran = as_dict(cell.server.get("container"))
    if ran:
        return ran
    return as_dict(as_dict(cell.cell.get("server")).get("container"))


def image_text(record: dict[str, Any]) -> str | None:
    """`REF (sha256:HEX12)`: the reference as written and the digest it ran; None without one."""
    image, digest = record.get("image"), record.get("digest")
    if not image:
        return None
    if not isinstance(digest, str) or not digest or digest in str(image):
        return str(image)
    algo, _, hexa = digest.partition(":")
    return f"{image} ({algo}:{hexa[:SHORT_DIGEST]})"


def packages_inside(record: dict[str, Any]) -> dict[str, str] | None:
    """name -> version from the freeze read inside, None when none was read."""
    freeze = as_dict(record.get("inside")).get("freeze")
    if not isinstance(freeze, list):
        return None
    out: dict[str, str] = {}
    for line in freeze:
        text = str(line).strip()
        if "==" in text:
            name, version = text.split("==", 1)
        elif " @ " in text:  # a direct reference (a local wheel, a git URL)
            name, version = text.split(" @ ", 1)
        else:
            continue
        out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def package_changes(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """`name A -> B` for each package whose version differs, `(added)`/`(removed)` marked."""
    lines = []
    for name in sorted(set(a) | set(b)):
        va, vb = a.get(name), b.get(name)
        if va == vb:
            continue
        if va is None:
            lines.append(f"{name}: (none) -> {vb} (added)")
        elif vb is None:
            lines.append(f"{name}: {va} -> (none) (removed)")
        else:
            lines.append(f"{name}: {va} -> {vb}")
    return lines


def image_section(a: CellEvidence, b: CellEvidence) -> Section:
    """What differs between the images the two cells' servers ran, the image itself first."""
    section = Section("image", SECTION_TITLES["image"])
    ra, rb = container_of(a), container_of(b)
    if not ra and not rb:
        return section
    digest_a, digest_b = ra.get("digest"), rb.get("digest")
    if not same(digest_a, digest_b) or not same(ra.get("image"), rb.get("image")):
        section.entries.append(Entry("image", image_text(ra), image_text(rb)))
    for key in ("runtime", "runtime_version"):
        if not same(ra.get(key), rb.get(key)):
            section.entries.append(Entry(key, ra.get(key), rb.get(key)))
    la, lb = as_dict(ra.get("labels")), as_dict(rb.get("labels"))
    for key in sorted(set(la) | set(lb)):
        if not same(la.get(key), lb.get(key)):
            section.entries.append(Entry(f"label {key}", la.get(key), lb.get(key)))
    ia, ib = as_dict(ra.get("inside")), as_dict(rb.get("inside"))
    if not same(ia.get("python"), ib.get("python")):
        section.entries.append(Entry("python inside", ia.get("python"), ib.get("python")))
    va, vb = as_dict(ia.get("versions")), as_dict(ib.get("versions"))
    for name in sorted(set(va) | set(vb)):
        if not same(va.get(name), vb.get(name)):
            section.entries.append(Entry(f"{name} inside", va.get(name), vb.get(name)))
    pa, pb = packages_inside(ra), packages_inside(rb)
    if pa is not None and pb is not None:
        changes = package_changes(pa, pb)
        if changes:
            section.blocks.append(Block(f"packages inside that differ: {len(changes)}", changes))
    elif ra and rb:
        for side, record, inside in (("A", ra, ia), ("B", rb, ib)):
            if packages_inside(record) is None:
                why = inside.get("error") or inside.get("freeze_error") or "not read"
                section.notes.append(f"packages inside not compared: none read for {side} ({why})")
    return section


def image_headline(section: Section) -> str | None:
    """`image: REF_A -> REF_B; packages inside: foo 1.0 -> 1.1, ...` when the image changed
    (named before anything else, as a changed commit is); None otherwise."""
    entry = next((e for e in section.entries if e.key == "image"), None)
    if entry is None:
        return None
    text = f"image: {entry.a or '(none: on the host)'} -> {entry.b or '(none: on the host)'}"
    changes = [line for block in section.blocks for line in block.lines]
    if changes:
        shown = ", ".join(line.replace(": ", " ", 1) for line in changes[:5])
        more = f", and {len(changes) - 5} more" if len(changes) > 5 else ""
        text += f"; packages inside: {shown}{more}"
    return text
