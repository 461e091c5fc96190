"""tools/judged_collections.py: the judged collections the estimate is checked on off Cranfield."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

from vrag_compress.beir import load_beir

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "judged_collections.py"


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def test_cranfield_variants_keep_the_judgments_and_change_the_pages(shared_data, tmp_path):
    out = _run("cranfield-variants", str(shared_data / "cranfield"), str(tmp_path))
    assert "cran_short: 1400 documents, 225 queries, 1612 judgments" in out
    short, body = load_beir(tmp_path / "cran_short"), load_beir(tmp_path / "cran_body")
    original = load_beir(shared_data / "cranfield")
    assert short.qrels == original.qrels == body.qrels
    first = json.loads((tmp_path / "cran_body" / "corpus.jsonl").read_text().splitlines()[0])
    assert first["title"] == "" and first["text"].startswith("an experimental study")
    assert len(short.docs["1"].split()) < len(original.docs["1"].split())


def test_cranfield_keywords_ask_the_same_needs_in_a_few_rare_words(shared_data, tmp_path):
    out = _run("cranfield-keywords", str(shared_data / "cranfield"), str(tmp_path / "kw"))
    assert "kw: 1400 documents, 225 queries, 1612 judgments" in out
    searches, original = load_beir(tmp_path / "kw"), load_beir(shared_data / "cranfield")
    assert searches.qrels == original.qrels and searches.docs == original.docs
    # "what similarity laws must be obeyed when constructing aeroelastic models of heated ..."
    assert searches.queries["1"] == "laws constructing aeroelastic"
    for query_id, words in searches.queries.items():
        assert 1 <= len(words.split()) <= 3, query_id
        assert "what" not in words.split(), query_id  # a stop word, though few abstracts have it


def _bookmark(tags: list[str], words: int, title: str = "A bookmark") -> dict:
    uris = [f"http://www.semanlink.net/tag/{t}" for t in tags]
    return {"tag": uris, "title": title, "comment": "word " * words, "arxiv_summary": ""}


def test_semanlink_subject_tags_become_queries_from_the_sdist(tmp_path):
    folder = tmp_path / "cherche-1.0.1" / "cherche" / "data" / "semanlink"
    folder.mkdir(parents=True)
    bookmarks = [_bookmark(["bert", "tweet"], 12) for _ in range(3)]
    bookmarks += [_bookmark(["bert", "sparql"], 2), _bookmark(["sparql"], 12)]
    (folder / "docs.json").write_text(json.dumps(bookmarks))
    labels = {"bert": "BERT", "tweet": "Tweet", "sparql": "SPARQL"}
    tags = {f"http://www.semanlink.net/tag/{t}": {"prefLabel": [v]} for t, v in labels.items()}
    (folder / "tags.json").write_text(json.dumps(tags))
    sdist = tmp_path / "cherche-1.0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tmp_path / "cherche-1.0.1", arcname="cherche-1.0.1")
    out = _run("semanlink", str(sdist), str(tmp_path / "sl"))
    # the 2-word bookmark is dropped; "tweet" names a form; "sparql" is on 1 kept document
    assert "4 documents, 1 queries, 3 judgments" in out
    data = load_beir(tmp_path / "sl")
    assert data.queries == {"bert": "BERT"}
    assert set(data.qrels["bert"]) == {"d0000", "d0001", "d0002"}
