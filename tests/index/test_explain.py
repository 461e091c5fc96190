"""Explanations: MaxSim split per query token, mapped to patches, heatmap and regions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from vrag_compress import VisualIndex, get_compressor, maxsim
from vrag_compress.cli import app
from vrag_compress.explain import explain_vectors, vector_patches


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_contributions_sum_to_maxsim_and_name_the_best_vector():
    rng = np.random.default_rng(0)
    query, vectors = unit(rng.normal(size=(7, 16))), unit(rng.normal(size=(5, 16)))
    explanation = explain_vectors(query, vectors)
    assert explanation.score == pytest.approx(maxsim(query, vectors), abs=1e-5)
    for token in explanation.tokens:
        sims = vectors @ query[token.token]
        assert token.vector == int(sims.argmax())
        assert token.contribution == pytest.approx(float(sims.max()), abs=1e-6)
    assert explanation.heat is None and explanation.regions == []


def test_pruned_vectors_map_to_their_kept_patch_and_merged_ones_to_their_group():
    kept = {"grid": np.array([2, 3]), "kept": np.array([1, 4])}
    assert vector_patches(kept, 2) == [[1], [4]]
    merged = {"grid": np.array([2, 3]), "assignment": np.array([0, 0, 1, 1, 0, 1])}
    assert vector_patches(merged, 2) == [[0, 1, 4], [2, 3, 5]]


def test_heat_and_region_cover_the_matched_patch():
    # a 4x4 grid; the query matches the vector kept from patch (row 2, col 3) = position 11
    vectors = unit(np.eye(4, 8, dtype=np.float32) + 0.01)
    layout = {"grid": np.array([4, 4]), "kept": np.array([0, 5, 11, 15])}
    query = unit(np.array([[0, 0, 1, 0, 0, 0, 0, 0]] * 3, dtype=np.float32) + 0.01)
    explanation = explain_vectors(query, vectors, layout)
    assert all(t.patches == [11] for t in explanation.tokens)
    assert explanation.heat.shape == (4, 4)
    assert np.unravel_index(explanation.heat.argmax(), (4, 4)) == (2, 3)
    (region,) = explanation.regions
    assert (region.x0, region.y0, region.x1, region.y1) == (0.75, 0.5, 1.0, 0.75)
    assert region.score == pytest.approx(explanation.score, abs=1e-5)
    assert region.box((400, 800)) == (300, 400, 400, 600)
    assert Image.new("RGB", (400, 800)).crop(region.box((400, 800))).size == (100, 200)


def test_two_hot_areas_give_two_regions_heaviest_first():
    vectors = unit(np.eye(2, 4, dtype=np.float32))
    layout = {"grid": np.array([3, 3]), "assignment": np.array([0, 0, 2, 0, 2, 2, 2, 2, 1])}
    query = unit(np.array([[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]], dtype=np.float32))
    regions = explain_vectors(query, vectors, layout).regions
    assert len(regions) == 2
    assert regions[0].score == pytest.approx(2.0) and regions[0].patches == 3
    assert (regions[1].x0, regions[1].y0) == (pytest.approx(2 / 3), pytest.approx(2 / 3))


@pytest.fixture(scope="module")
def indexes(shared_data: Path, law_index: Path, tmp_path_factory: pytest.TempPathFactory):
    """The court transcript page compressed by SAP (the session's `law_index`, read only) and
    by UOT (built here, as scotus.pdf)."""
    folder = tmp_path_factory.mktemp("explain")
    pdf = folder / "scotus.pdf"
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", pdf)
    paths = {"sap": law_index, "uot": folder / "uot.vrag"}
    compressor = get_compressor("uot", ratio=0.25)
    with VisualIndex.create(paths["uot"], model="tiny-colqwen2", compressor=compressor) as index:
        index.add([pdf], progress=False, ocr="never")
    return paths


@pytest.mark.parametrize("method", ["sap", "uot"])
def test_every_hit_explains_its_score_and_carries_regions(indexes, method):
    with VisualIndex.open(indexes[method], readonly=True) as index:
        (hit,) = index.search("oral argument before the court", k=1)
        explanation = hit.explain()
        assert explanation.score == pytest.approx(hit.score, abs=1e-3)
        assert explanation.layout == ("kept" if method == "sap" else "assignment")
        assert hit.regions and hit.regions == explanation.regions
        assert all(0 <= r.x0 < r.x1 <= 1 and 0 <= r.y0 < r.y1 <= 1 for r in hit.regions)
        assert [t.label for t in explanation.tokens][0]  # query tokens are named
        layout = index.page_layout(hit.doc_id, hit.page_no)
        for token in explanation.tokens:
            if method == "sap":
                assert token.patches == [int(layout["kept"][token.vector])]
            else:
                assert (
                    token.patches == np.flatnonzero(layout["assignment"] == token.vector).tolist()
                )
        again = index.explain("oral argument before the court", hit.doc_id, hit.page_no)
        assert again.to_dict() == explanation.to_dict()
        assert hit.to_dict()["regions"] == [r.to_dict() for r in hit.regions]
        with pytest.raises(KeyError, match="no page 9"):
            index.explain("x", hit.doc_id, 9)


def test_show_query_writes_a_heatmap_with_a_legend(indexes, tmp_path):
    with VisualIndex.open(indexes["uot"], readonly=True) as index:
        (document,) = index.documents()
        plain = index.page_image(document.doc_id, 1)
    out = tmp_path / "heat.png"
    args = ["show", str(indexes["uot"]), document.doc_id, "1", "-o", str(out), "--json"]
    result = CliRunner().invoke(app, [*args, "--query", "oral argument", "--overlay"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout[result.stdout.index("{") :])
    assert summary["layout"] == "assignment" and summary["regions"]
    with Image.open(out) as image:
        assert image.width == plain.width and image.height > plain.height  # legend strip below
        assert np.asarray(image.convert("RGB"))[: plain.height].std() > 0
    missing = CliRunner().invoke(app, [*args[:2], "nope", "1", "--query", "x"])
    assert missing.exit_code == 1 and "no document 'nope'" in missing.output
    no_page = CliRunner().invoke(app, [*args[:2], document.doc_id, "9", "--query", "x"])
    assert no_page.exit_code == 1 and "no page 9 of scotus.pdf" in no_page.output
    assert f"[{document.doc_id}]" in no_page.output and "(it has 1 page)" in no_page.output
