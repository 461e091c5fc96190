"""What compression will cost on your own questions: agreement, and retention where judged.

The label-free estimate (`vrag_compress.estimate`) invents its queries and cannot know how
users ask; a user usually can say (a chatbot's log, a list of questions they care about). Given
those questions, ``estimate_on_queries`` measures, per method and keep ratio, on a sample of
the collection's pages:

- ``overlap``: the share of the uncompressed top 10 that the compressed top 10 keeps;
- ``ndcg``: NDCG@10 of the compressed ranking with the uncompressed ranking as the truth (the
  page the uncompressed index ranks first has gain 10, the tenth gain 1): 1 when compression
  changes nothing the user would see. No judgments are needed, so it says how much the
  answers change, not whether they were right.

Given judgments too (qrels ``query-id<TAB>corpus-id<TAB>score`` with the questions, BEIR
layout), it measures the judged retention@10 (NDCG@10 compressed over uncompressed) on the
judged pages plus a sample of the others, each ranking predicted at the collection's size as
the label-free estimate does (`vrag_compress.estimate.collection_ndcg`: every relevant page is
in the sample, so the prediction's one assumption holds).

Every figure comes with its bootstrap interval over the questions: 90% for the agreement, 95%
for the judged retention (``JUDGED_LEVEL``: the interval a user chooses a method and ratio by).
The pages are encoded once and each method compresses the same encodings.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.compress import compressor_for, parse_method_spec
from vrag_compress.compress.budget_check import ndcg_at
from vrag_compress.encoders.base import PageEncoding
from vrag_compress.estimate.pseudo_queries import encode_texts, reads_text
from vrag_compress.estimate.ranking import (
    BOOTSTRAP,
    TOP,
    collection_ndcg,
    maxsim_matrix,
    retention_interval,
)
from vrag_compress.estimate.report import DEFAULT_METHODS, DEFAULT_RATIOS, EstimateError
from vrag_compress.estimate.sampling import render_pages, too_few

log = logging.getLogger(__name__)

DEFAULT_QUERY_SAMPLE = 500
"""Pages sampled for ``--queries-file``: the agreement is measured among them, and a sample has
fewer pages that can enter a top 10, so it reads high. On Cranfield (1,398 pages, its 225
questions, MiniLM) NDCG@10 agreement from 500 pages was 0.006-0.041 above that from every page
(300 pages: 0.017-0.059; 100: 0.05-0.15), with the methods in the same order at every size
(docs/retention.md, "On your own questions")."""
SAMPLE_BIAS = "0.006-0.041 at 500 of 1,398 pages, 0.05-0.15 at 100"
LEVEL = 0.9
JUDGED_LEVEL = 0.95
"""The judged retention's interval level. A user decides by it over several cells (methods and
ratios) at once, so each cell's interval should cover that cell's figure from all questions with
at least 95%: then 9 of 10 cells hold with probability 0.95**10 + 10 * 0.05 * 0.95**9 = 0.914
(independent cells), where a 90% interval gives 0.9**10 + 10 * 0.1 * 0.9**9 = 0.736, so one draw
of questions covers fewer than 9 of 10 cells one time in four. The agreement intervals stay 90%.
On five judged Cranfield collections 30 questions' 95% interval covered 9 or 10 of the 10 cells
on the first draw everywhere (90%: 8 on one), 94.2-95.0% of the cells over 200 draws, at widths
0.22-0.50 against 0.18-0.42 (docs/retention.md, "Judged questions: how many are enough")."""
MIN_QUESTIONS = 10
"""Below this many questions nothing is recommended: the bootstrap interval of a handful of
questions says little, and 30 judged questions already gave 95% intervals 0.22-0.50 wide."""

Progress = Callable[[str], None]


@dataclass
class QueryRow:
    """One method and ratio measured on the user's questions."""

    method: str
    ratio: float
    tokens_per_page: float
    overlap: float
    overlap_low: float
    overlap_high: float
    ndcg: float
    ndcg_low: float
    ndcg_high: float
    judged: float | None = None
    """Judged retention@10 (with ``--judged``) and its ``JUDGED_LEVEL`` interval below."""
    judged_low: float | None = None
    judged_high: float | None = None


@dataclass
class QueryEstimate:
    """The rows, and what they were measured on."""

    rows: list[QueryRow]
    n_pages: int
    collection_pages: int
    n_queries: int
    n_judged: int
    encoder: str
    notes: list[str] = field(default_factory=list)

    def recommend(self, target: float = 0.97) -> str:
        """The fewest vectors per page whose figure keeps ``target``: the judged retention when
        there are judgments, else the agreement NDCG@10 (a lower bound on what users keep:
        a changed answer can be as good)."""
        judged = self.n_judged > 0
        name = "judged retention@10" if judged else "agreement NDCG@10"
        asked = self.n_judged if judged else self.n_queries
        if asked < MIN_QUESTIONS:
            return (
                f"keep >= {target:g}: no recommendation from {asked} question(s); give at least "
                f"{MIN_QUESTIONS} (a few dozen: 30 judged questions gave 95% intervals 0.22-0.50 "
                "wide)"
            )

        def figure(row: QueryRow) -> float:
            return float(row.judged if judged and row.judged is not None else row.ndcg)

        fits = [r for r in self.rows if figure(r) >= target]
        if not fits:
            best = max(self.rows, key=lambda r: (figure(r), r.ratio))
            return (
                f"keep >= {target:g}: no method and ratio tried reaches it on your questions; the "
                f"best is {best.method} at {best.ratio:g} ({name} {figure(best):.3f})"
            )
        pick = min(fits, key=lambda r: (r.tokens_per_page, -figure(r)))
        return (
            f"keep >= {target:g}: use {pick.method} at {pick.ratio:g} ({name} "
            f"{figure(pick):.3f} on {asked} questions, "
            f"{pick.tokens_per_page:.1f} vectors per page)"
        )

    def to_dict(self, target: float = 0.97) -> dict[str, Any]:
        out = asdict(self)
        out["recommendation"] = self.recommend(target)
        out["target"] = target
        return out


# ------------------------------------------------------------------------------ reading files
def read_questions(path: Path) -> list[tuple[str, str]]:
    """(id, text) per question of ``path``: one question a line, or JSON lines with ``text``
    (and ``_id`` or ``id``; else the line number). Blank lines are skipped; a JSON line
    without text is an error naming its line."""
    if not path.is_file():
        raise EstimateError(f"{path}: no such questions file (one question a line, or JSONL)")
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EstimateError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
            text = str(record.get("text") or "").strip()
            if not text:
                raise EstimateError(f'{path}:{number}: a JSON line needs a non-empty "text"')
            out.append((str(record.get("_id", record.get("id", number))), text))
        else:
            out.append((str(number), line))
    if not out:
        raise EstimateError(f"{path}: no question in it (one question a line, or JSONL)")
    return out


def judged_files(path: Path) -> tuple[Path, Path]:
    """(qrels TSV, questions) of a BEIR folder or of a qrels file: the questions are the
    ``queries.jsonl`` beside the qrels file or one folder up (``qrels/test.tsv``)."""
    if path.is_dir():
        qrels = next(
            (p for p in (path / "qrels.tsv", path / "qrels" / "test.tsv") if p.is_file()), None
        )
        if qrels is None:
            raise EstimateError(f"{path}: no qrels.tsv (nor qrels/test.tsv) in this folder")
    elif path.is_file():
        qrels = path
    else:
        raise EstimateError(f"{path}: no such judgments file or folder")
    for folder in (qrels.parent, qrels.parent.parent):
        if (folder / "queries.jsonl").is_file():
            return qrels, folder / "queries.jsonl"
    raise EstimateError(
        f"{qrels}: no queries.jsonl beside it or one folder up (BEIR layout: the questions as "
        'JSON lines with "_id" and "text")'
    )


def read_judged(path: Path) -> tuple[list[tuple[str, str]], dict[str, dict[str, float]]]:
    """(judged questions, qrels query id -> {corpus id: score > 0}) of `judged_files`; a bad
    line is an error naming it, and questions without a positive judgment are left out."""
    qrels_file, questions_file = judged_files(path)
    qrels: dict[str, dict[str, float]] = {}
    with qrels_file.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t"), 1):
            if not row or (number == 1 and not _number(row[-1])):
                continue  # blank line, or the header
            if len(row) < 3 or not _number(row[2]):
                raise EstimateError(
                    f"{qrels_file}:{number}: expected query-id<TAB>corpus-id<TAB>score, got {row!r}"
                )
            if float(row[2]) > 0:
                qrels.setdefault(row[0].strip(), {})[row[1].strip()] = float(row[2])
    questions = [(i, t) for i, t in read_questions(questions_file) if i in qrels]
    if not questions:
        raise EstimateError(f"{qrels_file}: none of its query ids is in {questions_file}")
    return questions, qrels


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------- the measurement
def mean_bootstrap(values: np.ndarray, seed: int = 0, level: float = LEVEL) -> tuple[float, float]:
    """Bootstrap interval (``level``) of the mean of per-question ``values``."""
    if len(values) < 2:
        return math.nan, math.nan
    draws = np.random.default_rng(seed).integers(0, len(values), (BOOTSTRAP, len(values)))
    tail = (1.0 - level) / 2
    low, high = np.quantile(values[draws].mean(axis=1), [tail, 1.0 - tail])
    return float(low), float(high)


def agreement(full: np.ndarray, compressed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per question: (top-10 overlap, NDCG@10 of ``compressed`` with ``full``'s ranking as the
    truth: its first page gain 10, its tenth gain 1)."""
    k = min(TOP, full.shape[1])
    truth = np.argsort(-full, axis=1, kind="stable")[:, :k]
    gains = np.zeros_like(full, dtype=np.float64)
    np.put_along_axis(gains, truth, np.arange(k, 0, -1, dtype=np.float64)[None, :], axis=1)
    got = np.argsort(-compressed, axis=1, kind="stable")[:, :k]
    overlap = (np.take_along_axis(gains, got, axis=1) > 0).sum(axis=1) / k
    return overlap.astype(np.float64), ndcg_at(compressed, gains, TOP)


def judged_gains(
    page_ids: Sequence[Sequence[str]], questions: Sequence[str], qrels: dict[str, dict[str, float]]
) -> np.ndarray:
    """[n_questions, n_pages] judged gains; a page answers to any of its ids (page id,
    document id, file name...)."""
    gains = np.zeros((len(questions), len(page_ids)))
    for row, qid in enumerate(questions):
        judged = qrels.get(qid, {})
        for col, ids in enumerate(page_ids):
            gains[row, col] = max((judged.get(i, 0.0) for i in ids), default=0.0)
    return gains


def measure(
    pages: Sequence[PageEncoding],
    queries: Sequence[np.ndarray],
    methods: Sequence[str],
    ratios: Sequence[float],
    *,
    n_layers: int | None = None,
    model_id: str | None = None,
    gains: np.ndarray | None = None,
    judged_rows: Sequence[int] = (),
    collection_pages: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> list[QueryRow]:
    """Each method and ratio against the uncompressed pages on ``queries``: agreement on every
    query, judged retention (``gains`` [len(judged_rows), n_pages]) on the ``judged_rows``
    queries, predicted at ``collection_pages``."""
    vectors = [p.vectors for p in pages]
    full = maxsim_matrix(queries, vectors)
    total = max(collection_pages or 0, len(pages))
    picked = list(judged_rows)
    full_judged = collection_ndcg(full[picked], gains, total) if gains is not None else None
    rows = []
    for spec in methods:
        name, params = parse_method_spec(spec)
        for ratio in ratios:
            compressor = compressor_for(
                name, n_layers=n_layers, model_id=model_id, ratio=ratio, **params
            )
            kept = compressor.compress_many(list(pages))
            scores = maxsim_matrix(queries, [c.vectors for c in kept])
            overlap, ndcg = agreement(full, scores)
            row = QueryRow(
                spec,
                float(ratio),
                float(np.mean([len(c.vectors) for c in kept])),
                float(overlap.mean()),
                *mean_bootstrap(overlap, seed),
                float(ndcg.mean()),
                *mean_bootstrap(ndcg, seed),
            )
            if gains is not None and full_judged is not None:
                ndcg_judged = collection_ndcg(scores[picked], gains, total)
                mean_full = float(full_judged.mean())
                row.judged = float(ndcg_judged.mean()) / mean_full if mean_full > 0 else math.nan
                row.judged_low, row.judged_high = retention_interval(
                    ndcg_judged, full_judged, seed, JUDGED_LEVEL
                )
            rows.append(row)
            if progress:
                progress(f"{spec} @ {ratio:g}")
    return rows


# ------------------------------------------------------------------------------ the source
@dataclass
class SourcePages:
    """Sampled pages of an index or a folder, encoded at full resolution, with their ids."""

    pages: list[PageEncoding]
    ids: list[tuple[str, ...]]
    collection_pages: int
    encoder: Any


def estimate_on_queries(
    source: str | Path,
    *,
    queries_file: Path | None = None,
    judged: Path | None = None,
    methods: Sequence[str] = DEFAULT_METHODS,
    ratios: Sequence[float] = DEFAULT_RATIOS,
    sample: int = DEFAULT_QUERY_SAMPLE,
    seed: int = 0,
    model: str | None = None,
    device: str = "auto",
    progress: Progress | None = None,
) -> QueryEstimate:
    """Agreement on the questions of ``queries_file`` and/or judged retention on ``judged``
    (its questions count for agreement too), on ``sample`` pages of ``source`` (an index
    folder or a folder / files of documents) plus every judged page found there."""
    if queries_file is None and judged is None:
        raise EstimateError("give a questions file (--queries-file) or judgments (--judged)")
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 2:
        raise EstimateError(f"sample must be at least 2 pages, got {sample!r}")
    asked = read_questions(queries_file) if queries_file is not None else []
    judged_questions, qrels = read_judged(judged) if judged is not None else ([], {})
    wanted = {doc for per in qrels.values() for doc in per}
    got = read_source(Path(source), sample, seed, wanted, model, device)
    if progress:
        progress(f"encoded {len(got.pages)} sampled pages")
    found = {i for ids in got.ids for i in ids}
    judged_questions = [(q, t) for q, t in judged_questions if found & set(qrels[q])]
    notes = _judged_notes(judged, qrels, judged_questions)
    texts = [t for _, t in asked] + [t for _, t in judged_questions]
    if not texts:
        raise EstimateError(f"{judged}: no judged page of any question is in {source}")
    vectors = list(got.encoder.encode_queries(texts))
    gains = None
    if judged_questions:
        gains = judged_gains(got.ids, [q for q, _ in judged_questions], qrels)
    rows = measure(
        got.pages,
        vectors,
        methods,
        ratios,
        n_layers=int(got.encoder.n_layers),
        model_id=getattr(got.encoder, "model_id", None),
        gains=gains,
        judged_rows=range(len(asked), len(texts)),
        collection_pages=got.collection_pages,
        seed=seed,
        progress=progress,
    )
    if len(got.pages) < got.collection_pages:
        notes.append(
            f"agreement among {len(got.pages)} sampled pages of {got.collection_pages}: a sample "
            "has fewer pages that can enter a top 10, so the agreement reads high (measured: "
            f"{SAMPLE_BIAS}); the methods' order held at every sample size. Raise --sample to "
            "measure on more (the judged figure is predicted at the collection's size)"
        )
    return QueryEstimate(
        rows,
        len(got.pages),
        got.collection_pages,
        len(texts),
        len(judged_questions),
        str(getattr(got.encoder, "model_id", "")),
        notes,
    )


def _judged_notes(
    judged: Path | None, qrels: dict[str, dict[str, float]], kept: Sequence[tuple[str, str]]
) -> list[str]:
    if judged is None or len(kept) == len(qrels):
        return []
    return [
        f"{len(qrels) - len(kept)} of {len(qrels)} judged questions left out: none of their "
        "judged pages (or their questions) was found in the source"
    ]


def read_source(
    path: Path, sample: int, seed: int, wanted: set[str], model: str | None, device: str
) -> SourcePages:
    """``sample`` random pages of ``path`` and every page whose id is in ``wanted``, encoded."""
    from vrag_compress.index import VisualIndex

    if not path.exists():
        raise EstimateError(f"{path}: no such index, folder or file")
    if VisualIndex.exists(path):
        with VisualIndex.open(path, model=model, device=device, readonly=True) as index:
            return _index_pages(index, sample, seed, wanted)
    from vrag_compress.defaults import DEFAULT_MODEL
    from vrag_compress.encoders import load_encoder

    encoder = load_encoder(model or DEFAULT_MODEL, device=device)
    return _folder_pages(path, sample, seed, wanted, encoder)


def _draw(n: int, sample: int, seed: int, forced: set[int]) -> list[int]:
    """``sample`` positions of ``n`` drawn with ``seed``, plus ``forced``."""
    rng = np.random.default_rng(seed)
    drawn = rng.choice(n, min(sample, n), replace=False).tolist()
    return sorted(forced.union(int(i) for i in drawn))


def _encode(encoder: Any, texts: list[str | None], images: list[Any]) -> list[PageEncoding]:
    if reads_text(encoder):
        return encode_texts(encoder, [t or "" for t in texts])
    return list(encoder.encode_pages(images, with_stats=True))


def _keep_encoded(
    pages: list[PageEncoding], ids: list[tuple[str, ...]], total: int, encoder: Any
) -> SourcePages:
    usable = [i for i, p in enumerate(pages) if p.n_tokens > 0]
    if len(usable) < 2:
        raise EstimateError("fewer than 2 sampled pages have any content to rank")
    return SourcePages([pages[i] for i in usable], [ids[i] for i in usable], total, encoder)


def _index_pages(index: Any, sample: int, seed: int, wanted: set[str]) -> SourcePages:
    ids = sorted(index.store.page_ids())
    too_few(len(ids), index.path)
    forced = {i for i, pid in enumerate(ids) if pid in wanted or pid.rpartition(":")[0] in wanted}
    records = index.store.get(
        [ids[i] for i in _draw(len(ids), sample, seed, forced)], missing="skip"
    )
    images = []
    if not reads_text(index.encoder):
        images = [
            index.assets.load(r.image_ref, r.metadata.get("source"), r.page_no) for r in records
        ]
    names = [_record_ids(r) for r in records]
    pages = _encode(index.encoder, [r.text for r in records], images)
    return _keep_encoded(pages, names, len(ids), index.encoder)


def _record_ids(record: Any) -> tuple[str, ...]:
    """The ids a judgment may give a stored page: its page id, its document's id, and its
    source file's name and stem with and without the page number."""
    ids = [str(record.page_id), str(record.doc_id)]
    source = record.metadata.get("source") if record.metadata else None
    if source:
        name = Path(str(source)).name
        ids += _file_ids(name, int(record.page_no))
    return tuple(ids)


def _file_ids(name: str, page_no: int) -> list[str]:
    stem = Path(name).stem
    return [name, stem, f"{name}:{page_no}", f"{stem}:{page_no}"]


def _folder_pages(
    path: Path, sample: int, seed: int, wanted: set[str], encoder: Any
) -> SourcePages:
    """Pages of a folder of documents: every page's ids are known from the documents' page
    counts (a PDF is opened without rendering a page), then only the drawn and the judged
    pages are rendered."""
    from vrag_compress.ingest import IngestError, find_documents, open_document, page_id

    every: list[tuple[Path, int, tuple[str, ...]]] = []
    for doc in find_documents(path)[0]:
        try:
            with open_document(doc) as opened:
                for n in range(1, opened.n_pages + 1):
                    every.append(
                        (
                            doc,
                            n,
                            (page_id(opened.doc_id, n), opened.doc_id, *_file_ids(doc.name, n)),
                        )
                    )
        except IngestError as error:
            log.warning("%s", error)
    too_few(len(every), path)
    forced = {i for i, (_, _, ids) in enumerate(every) if wanted.intersection(ids)}
    chosen = _draw(len(every), sample, seed, forced)
    rendered, ids = [], []
    for doc in dict.fromkeys(every[i][0] for i in chosen):
        numbers = [every[i][1] for i in chosen if every[i][0] == doc]
        by_no = {every[i][1]: every[i][2] for i in chosen if every[i][0] == doc}
        for page in render_pages(doc, numbers):
            rendered.append(page)
            ids.append(by_no[page.page_no])
    pages = _encode(encoder, [p.text for p in rendered], [p.image for p in rendered])
    return _keep_encoded(pages, ids, len(every), encoder)
