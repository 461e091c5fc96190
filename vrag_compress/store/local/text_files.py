"""Integrity of the BM25 engine's tantivy files (text_engine.py), which tantivy does not check
when it opens them: a flipped byte could change which pages text search returns, or their
order, or make tantivy panic (a `BaseException` that passes every ``except Exception``).

Every file tantivy writes into a segment ends with a footer holding the CRC32 of the bytes
before it. The footer is written with the file, before a commit's ``meta.json`` names it, and
tantivy never rewrites a file (new data, deletes included, gets new names), so the checksum
always describes the committed file: a kill -9 or a background merge cannot leave it out of
step. ``meta.json`` has no footer: it is checked against the rest (the schema and settings
tantivy writes for ours, every named file present and whole, each segment's document and
deleted counts against its fieldnorm file (a byte per document) and the bitset of its deletes
file, the opstamps in order); the engine also requires exactly one stamp document.
"""

from __future__ import annotations

import functools
import json
import os
import re
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any

from vrag_compress.store.base import StoreCorruptError, StoreError

META = "meta.json"
COMPONENTS = ("idx", "pos", "term", "fieldnorm", "fast", "store")  # a segment's files
FOOTER_MAGIC = 1337
REPAIR = "`vrag optimize` (LocalStore.rebuild_text_index()) rebuilds it from the page text"
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
_ATTEMPTS = 8  # fresh looks at meta.json while a writer keeps committing under the check
_Key = tuple[int, int, int]


# The engine's schema lives here, beside the files it defines (text_engine uses it).
MISSING = (
    "text search needs the tantivy package: pip install tantivy "
    "(or open the store with text_engine='fts5')"
)


def _tantivy() -> Any:
    try:
        import tantivy
    except ImportError:
        raise StoreError(MISSING) from None
    return tantivy


@functools.cache
def _schema() -> Any:
    builder = _tantivy().SchemaBuilder()
    builder.add_text_field("text", tokenizer_name="whitespace", index_option="freq")
    builder.add_unsigned_field("pid", indexed=True, fast=True)
    builder.add_unsigned_field("crc", fast=True)
    builder.add_unsigned_field("seq", fast=True)
    return builder.build()


class TextIndexError(StoreCorruptError):
    """A damaged file of the text index (``file`` names it). The page text in the catalog is
    intact, so the advice is a rebuild, not a backup."""

    def __init__(self, file: str, detail: str):
        super().__init__(file, detail)
        self.args = (f"text index file {file} is damaged: {detail}; {REPAIR}",)


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust panic raised through pyo3 (``pyo3_runtime.PanicException``,
    which derives from BaseException and cannot be imported)."""
    return type(exc).__name__ == "PanicException"


class TextFiles:
    """Checks one text index's files, remembering those found whole: a segment file never
    changes under its name, so a search re-reads only what a commit or merge added."""

    def __init__(self, path: Path):
        self.path = path
        self._whole: dict[str, tuple[_Key, tuple[int, int] | None]] = {}
        self._meta_ok: _Key | None = None

    def check(self, *, cached: bool = True) -> None:
        """Raise `TextIndexError` naming the first damaged file."""
        found = self.damage(cached=cached)
        if found is not None:
            raise TextIndexError(*found)

    def damage(self, *, cached: bool = True) -> tuple[str, str] | None:
        """``(file, what is wrong)`` of the first damaged file, or None. ``cached``: trust a
        ``meta.json`` and files unchanged since they were found whole (searches); `verify`
        reads everything."""
        meta_path = self.path / META
        for _ in range(_ATTEMPTS):
            raw = None
            try:
                key = _key(meta_path)
                if cached and key == self._meta_ok:
                    return None
                raw = meta_path.read_bytes()
                found = self._check(raw, cached)
            except FileNotFoundError as exc:  # really missing, or a newer commit deleted it
                if _read(meta_path) == raw:
                    return str(exc.filename or meta_path), "the file is missing"
                continue
            if found is None and cached:
                self._meta_ok = key
            return found
        return None  # a writer kept committing: nothing held still long enough to be damaged

    def _check(self, raw: bytes, cached: bool) -> tuple[str, str] | None:
        meta_file = str(self.path / META)
        try:
            meta = json.loads(raw)
        except ValueError as exc:
            return meta_file, f"not JSON ({exc})"
        problem = _meta_problem(meta)
        if problem:
            return meta_file, problem
        names: list[str] = []
        for segment in meta["segments"]:
            stem = segment["segment_id"].replace("-", "")
            parts = [f"{stem}.{c}" for c in COMPONENTS]
            deletes = segment["deletes"]
            if deletes is not None:
                parts.append(f"{stem}.{deletes['opstamp']}.del")
            for name in parts:
                info = self._file(name, cached)
                if isinstance(info, str):
                    return str(self.path / name), info
                if info is not None and (problem := _count_problem(segment, name, *info)):
                    return meta_file, problem
            names += parts
        if cached:  # forget files a newer commit dropped
            self._whole = {n: self._whole[n] for n in names if n in self._whole}
        return None

    def _file(self, name: str, cached: bool) -> tuple[int, int] | None | str:
        """A named file checked: None (whole), ``(documents, alive)`` for a deletes or
        fieldnorm file (alive: -1), or what is wrong with it."""
        path = self.path / name
        key = _key(path)
        seen = self._whole.get(name)
        if cached and seen is not None and seen[0] == key:
            return seen[1]
        body = _body(path.read_bytes())
        if body is None:
            return "it fails its checksum (tantivy's footer CRC32)"
        info = None
        if name.endswith((".del", ".fieldnorm")):
            info = _bitset(body) if name.endswith(".del") else _fieldnorms(body)
            if info is None:
                return "its layout is not tantivy's"
        if cached:
            self._whole[name] = (key, info)
        return info


def _key(path: Path) -> _Key:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _body(data: bytes) -> bytes | None:
    """A tantivy file's content without its footer (JSON with the content's CRC32, its
    length as u32, the magic number as u32), or None when the footer does not hold."""
    if len(data) < 8:
        return None
    length, magic = struct.unpack("<II", data[-8:])
    if magic != FOOTER_MAGIC or length + 8 > len(data):
        return None
    try:
        footer = json.loads(data[-8 - length : -8])
    except ValueError:
        return None
    body = data[: -8 - length]
    if not isinstance(footer, dict) or footer.get("crc") != zlib.crc32(body):
        return None
    return body


def _bitset(body: bytes) -> tuple[int, int] | None:
    """``(documents, alive)`` of a deletes file: a u32 document count, then the alive bits
    in little-endian u64 words."""
    if len(body) < 4:
        return None
    (n,) = struct.unpack("<I", body[:4])
    if len(body) != 4 + 8 * ((n + 63) // 64):
        return None
    alive = int.from_bytes(body[4:], "little") & ((1 << n) - 1)
    return n, alive.bit_count()


def _fieldnorms(body: bytes) -> tuple[int, int] | None:
    """``(documents, -1)`` of a fieldnorm file: a composite file (the fields' data, a footer
    of field offsets, the footer's length as u32) holding one byte per document of the one
    field with fieldnorms (``text``)."""
    if len(body) < 4:
        return None
    start = len(body) - 4 - struct.unpack("<I", body[-4:])[0]
    footer = body[max(start, 0) : -4]
    fields, pos = _vint(footer, 0)
    offset, _ = _vint(footer, pos)
    if start < 0 or fields != 1 or offset is None or offset > start:
        return None
    return start - offset, -1


def _vint(data: bytes, pos: int) -> tuple[int | None, int]:
    """Tantivy's variable-length int at ``pos`` (7 bits a byte, the last byte's top bit set)
    and the position after it; None when the data ends first."""
    value = shift = 0
    for i in range(pos, len(data)):
        value |= (data[i] & 0x7F) << shift
        if data[i] & 0x80:
            return value, i + 1
        shift += 7
    return None, len(data)


def _count_problem(segment: dict, name: str, documents: int, alive: int) -> str | None:
    """Where a segment's counts in ``meta.json`` disagree with its file ``name``."""
    deletes = segment["deletes"]
    if documents != segment["max_doc"]:
        return (
            f"segment {segment['segment_id']} counts {segment['max_doc']} documents, its file "
            f"{name} {documents}"
        )
    if alive >= 0 and alive != documents - deletes["num_deleted_docs"]:
        return (
            f"segment {segment['segment_id']} counts {deletes['num_deleted_docs']} deleted "
            f"documents, its deletes file {documents - alive}"
        )
    return None


def _meta_problem(meta: Any) -> str | None:
    """What in a parsed ``meta.json`` is not what tantivy writes for this index, or None."""
    if not isinstance(meta, dict) or not {"segments", "schema", "opstamp"} <= set(meta):
        return "entries are missing"
    expected = _expected_meta()
    if set(meta) - {*expected, "payload"}:
        return f"unknown entries {sorted(set(meta) - {*expected, 'payload'})}"
    for entry in ("schema", "index_settings"):
        if meta.get(entry) != expected[entry]:
            return f"its {entry} is not the text index's"
    opstamp, segments = meta["opstamp"], meta["segments"]
    if not _count(opstamp) or not isinstance(segments, list):
        return "its opstamp or segment list is malformed"
    for segment in segments:
        if not isinstance(segment, dict) or set(segment) != {"segment_id", "max_doc", "deletes"}:
            return f"segment entry {segment!r:.100} is malformed"
        deletes = segment["deletes"]
        if (
            not isinstance(segment["segment_id"], str)
            or not _UUID.fullmatch(segment["segment_id"])
            or not _count(segment["max_doc"])
            or not (deletes is None or _deletes_shape(deletes))
        ):
            return f"segment entry {segment!r:.100} is malformed"
        if deletes is not None and deletes["opstamp"] > opstamp:
            return f"segment {segment['segment_id']} has deletes from after the last commit"
    return None


def _deletes_shape(deletes: Any) -> bool:
    return (
        isinstance(deletes, dict)
        and set(deletes) == {"num_deleted_docs", "opstamp"}
        and _count(deletes["num_deleted_docs"])
        and _count(deletes["opstamp"])
    )


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@functools.cache
def _expected_meta() -> dict[str, Any]:
    """The ``meta.json`` of an empty index of the engine's schema (written by this tantivy)."""
    with tempfile.TemporaryDirectory(prefix="vrag-text-schema-") as tmp:
        _tantivy().Index(_schema(), path=tmp)
        meta = json.loads((Path(tmp) / META).read_bytes())
    assert isinstance(meta, dict)
    return {k: v for k, v in meta.items() if k != "payload"}
