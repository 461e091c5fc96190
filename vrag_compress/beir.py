"""BEIR-layout retrieval datasets: text corpora (Cranfield) and page-image corpora (ViDoRe).

The one reader of the layout, for calibration (`vrag calibrate`) and the benchmarks
(`vrag bench retention`, `estimate`, `lexical`, ...), which live in a distribution of their own.
Layout (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv`` or ``qrels/test.tsv``) as described in
``shared/data/README.md``. Unlike some BEIR loaders, a document whose id equals a query id is
kept (the classic collections reuse small integers for both).
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class DatasetError(ValueError):
    """A dataset folder or name cannot be read; the message says which file and line."""


def read_jsonl(path: Path, error: type[Exception] = DatasetError) -> list[dict]:
    """The JSON objects of a JSONL file (blank lines skipped); `error` names file and line."""
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
            if not isinstance(row, dict):
                raise error(f"{path}:{number}: expected a JSON object")
            rows.append(row)
    return rows


@dataclass
class BeirDataset:
    """A retrieval dataset in memory.

    docs: doc id -> text (text corpora) or absolute image path (image corpora), file order.
    queries: query id -> text, file order. qrels: query id -> {doc id: graded gain}.
    """

    name: str
    kind: str  # "text" or "image"
    docs: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    root: Path | None = None
    images: dict[str, Any] = field(default_factory=dict)  # doc id -> PIL image (HF datasets)

    @property
    def doc_ids(self) -> list[str]:
        return list(self.docs)

    def empty_docs(self) -> list[str]:
        """Text documents with neither title nor text (nothing to encode; Cranfield has two)."""
        return [d for d, text in self.docs.items() if self.kind == "text" and not text.strip()]

    def judged_queries(self) -> list[str]:
        """Query ids with at least one relevant (gain > 0) judged document in the corpus."""
        return [
            q
            for q in self.queries
            if any(g > 0 and d in self.docs for d, g in self.qrels.get(q, {}).items())
        ]

    def best_document(self, query_id: str) -> str:
        """The query's most relevant judged document (highest gain; ties: first in qrels order)."""
        qrels = self.qrels.get(query_id, {})
        judged = [(d, g) for d, g in qrels.items() if g > 0 and d in self.docs]
        if not judged:
            raise DatasetError(f"{self.name}: query {query_id!r} has no relevant document")
        return max(judged, key=lambda item: item[1])[0]

    def load_image(self, doc_id: str):  # noqa: ANN201 (PIL import kept lazy)
        """The page image of an image corpus, as RGB."""
        from PIL import Image

        if doc_id in self.images:
            return self.images[doc_id].convert("RGB")
        return Image.open(self.docs[doc_id]).convert("RGB")


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise DatasetError(f"missing {path}; a BEIR folder needs corpus.jsonl and queries.jsonl")
    rows = read_jsonl(path, DatasetError)
    for number, row in enumerate(rows, start=1):
        if "_id" not in row:
            raise DatasetError(f"{path}: record {number} needs an '_id'")
    return rows


def _doc_text(row: dict) -> str:
    """Title and text joined, without repeating a title the text already starts with."""
    title = str(row.get("title") or "").strip()
    text = str(row.get("text") or "").strip()
    if title and not text.startswith(title):
        return f"{title}. {text}" if text else title
    return text


def _read_corpus(root: Path) -> tuple[str, dict[str, str]]:
    path = root / "corpus.jsonl"
    rows = _read_jsonl(path)
    if not rows:
        raise DatasetError(f"{path} is empty")
    kind = "image" if "image" in rows[0] else "text"
    docs: dict[str, str] = {}
    for line_no, row in enumerate(rows, 1):
        doc_id = str(row["_id"])
        if doc_id in docs:
            raise DatasetError(f"{path}: duplicate document id {doc_id!r} (row {line_no})")
        if kind == "image":
            if "image" not in row:
                raise DatasetError(f"{path}: row {line_no} has no 'image' in an image corpus")
            image = (root / str(row["image"])).resolve()
            if not image.is_file():
                raise DatasetError(f"{path}: row {line_no}: image {image} does not exist")
            docs[doc_id] = str(image)
        else:
            docs[doc_id] = _doc_text(row)  # may be empty: kept, the runner reports and skips it
    return kind, docs


def _read_qrels(root: Path) -> dict[str, dict[str, int]]:
    candidates = [root / "qrels.tsv", root / "qrels" / "test.tsv"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise DatasetError(f"no qrels in {root}: expected qrels.tsv or qrels/test.tsv")
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        for line_no, row in enumerate(reader, 1):
            if not row or (line_no == 1 and row[0] == "query-id"):
                continue
            if len(row) != 3:
                raise DatasetError(f"{path}:{line_no}: expected 3 tab-separated columns, got {row}")
            try:
                gain = int(float(row[2]))
            except ValueError as exc:
                raise DatasetError(f"{path}:{line_no}: score {row[2]!r} is not a number") from exc
            qrels.setdefault(row[0], {})[row[1]] = gain
    return qrels


def load_beir(path: str | Path) -> BeirDataset:
    """Read a local BEIR folder (text or image corpus)."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise DatasetError(f"dataset folder {root} does not exist")
    kind, docs = _read_corpus(root)
    queries = {str(r["_id"]): str(r.get("text") or "") for r in _read_jsonl(root / "queries.jsonl")}
    qrels = _read_qrels(root)
    unknown = [q for q in qrels if q not in queries]
    if unknown:
        raise DatasetError(f"{root}: qrels name queries not in queries.jsonl: {unknown[:5]}")
    return BeirDataset(root.name, kind, docs, queries, qrels, root=root)


def write_subset(ds: BeirDataset, out: Path, queries: list[str], docs: set[str]) -> Path:
    """A new BEIR folder ``out`` holding ``queries``, the ``docs`` among the corpus (in corpus
    order) and the judgments between them: a small judged collection cut from a large one."""
    out.mkdir()
    with (out / "corpus.jsonl").open("w") as f:
        for d in ds.doc_ids:
            if d in docs:
                f.write(json.dumps({"_id": d, "title": "", "text": ds.docs[d]}) + "\n")
    with (out / "queries.jsonl").open("w") as f:
        for q in queries:
            f.write(json.dumps({"_id": q, "text": ds.queries[q]}) + "\n")
    lines = [f"{q}\t{d}\t{g}" for q in queries for d, g in ds.qrels[q].items() if d in docs]
    (out / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(lines) + "\n")
    return out


def write_slice(
    ds: BeirDataset,
    out: Path,
    n_queries: int,
    n_extra: int,
    *,
    max_judged: int = 5,
    also: tuple[str, ...] = (),
) -> Path:
    """`write_subset` of the first ``n_queries`` judged queries with at most ``max_judged``
    judged documents each, those documents, the first ``n_extra`` of the corpus and ``also``:
    a judged collection small enough to encode in a test, whose questions keep their answers."""
    queries = [q for q in ds.judged_queries() if len(ds.qrels[q]) <= max_judged][:n_queries]
    keep = {d for q in queries for d in ds.qrels[q]} | set(ds.doc_ids[:n_extra]) | set(also)
    return write_subset(ds, out, queries, keep)


def load_hf_beir(name: str, split: str = "test") -> BeirDataset:
    """A ViDoRe BEIR dataset from the Hugging Face hub (configs corpus / queries / qrels)."""
    try:
        from datasets import load_dataset
    except ImportError as exc:
        raise DatasetError(
            f"{name!r} is not a local folder; loading hub datasets needs `pip install datasets` "
            "and network access"
        ) from exc
    try:
        corpus = load_dataset(name, "corpus", split=split)
        queries = load_dataset(name, "queries", split=split)
        qrels_rows = load_dataset(name, "qrels", split=split)
    except Exception as exc:  # noqa: BLE001 (hub errors have many types; re-raise one clear error)
        raise DatasetError(
            f"cannot load {name!r} from the Hugging Face hub ({exc.__class__.__name__}: {exc}); "
            "offline, export it to a BEIR folder and pass the folder"
        ) from exc
    images = {str(r["corpus-id"]): r["image"] for r in corpus}
    docs = {doc_id: f"hf://{name}/{doc_id}" for doc_id in images}
    query_text = {str(r["query-id"]): str(r["query"]) for r in queries}
    qrels: dict[str, dict[str, int]] = {}
    for r in qrels_rows:
        qrels.setdefault(str(r["query-id"]), {})[str(r["corpus-id"])] = int(r["score"])
    return BeirDataset(name.split("/")[-1], "image", docs, query_text, qrels, images=images)


def load_dataset(name_or_path: str | Path) -> BeirDataset:
    """A local BEIR folder, or a hub dataset id such as ``vidore/docvqa_test_subsampled_beir``."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        return load_beir(path)
    if "/" in str(name_or_path) and not str(name_or_path).startswith((".", "/")):
        return load_hf_beir(str(name_or_path))
    raise DatasetError(f"dataset {name_or_path!r}: no such folder (and not a hub id owner/name)")


def split_queries(
    dataset: BeirDataset, n_calibration: int, seed: int = 0
) -> tuple[list[str], list[str]]:
    """Judged query ids split into (calibration, evaluation), disjoint, seeded shuffle;
    evaluation keeps file order."""
    judged = dataset.judged_queries()
    if n_calibration <= 0:
        return [], judged
    if n_calibration >= len(judged):
        raise DatasetError(
            f"{dataset.name}: {n_calibration} calibration queries leave none of the "
            f"{len(judged)} judged queries for evaluation; lower --calibration-queries"
        )
    shuffled = judged[:]
    random.Random(seed).shuffle(shuffled)
    calibration = set(shuffled[:n_calibration])
    return [q for q in judged if q in calibration], [q for q in judged if q not in calibration]
