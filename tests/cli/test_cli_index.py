"""The everyday `vrag` commands: exit codes and --json schemas, with the tiny offline model."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from vrag_compress.cli import app

pytestmark = pytest.mark.slow  # end to end with real models and data

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    if result.exit_code not in (0, 3):
        print(result.stderr, result.exception)
    return result.exit_code, result.stdout


@pytest.fixture(scope="module")
def cli_index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs")
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder / "scotus.pdf")
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", folder / "multi.pdf")
    path = tmp_path_factory.mktemp("cli") / "idx"
    code, stdout = run(
        "index",
        folder,
        "--index",
        path,
        "--model",
        "tiny-colqwen2",
        "--method",
        "sap",
        "--ratio",
        "0.2",
        "--metadata",
        "team=legal",
        "--json",
    )
    assert code == 0, stdout
    report = json.loads(stdout)
    assert report["pages_indexed"] > 0 and report["failures"] == []
    return path


def test_search_filter_the_backend_refuses_is_a_usage_error(cli_index: Path, tmp_path: Path):
    pytest.importorskip("qdrant_client")
    url = f"qdrant+local://{tmp_path / 'q'}?collection=idx"
    assert run("migrate", cli_index, url)[0] == 0
    result = runner.invoke(
        app,
        ["search", str(cli_index), "x", "--store", url, "--filter", '{"filename": {"$gt": "a"}}'],
    )
    assert result.exit_code == 2, result.output
    assert "numbers only" in result.output and "Traceback" not in result.output


def test_search_json_schema(cli_index: Path):
    code, stdout = run("search", cli_index, "oral argument", "-k", "3", "--json")
    assert code == 0, stdout
    payload = json.loads(stdout)
    assert payload["query"] == "oral argument"
    assert len(payload["hits"]) == 3
    hit = payload["hits"][0]
    assert set(hit) >= {"doc_id", "page_no", "score", "source", "metadata", "text", "image_path"}
    assert hit["metadata"]["team"] == "legal"


def test_search_filter_json_and_pairs(cli_index: Path):
    code, stdout = run(
        "search", cli_index, "x", "-k", "50", "--filter", "filename=scotus.pdf", "--json"
    )
    assert code == 0
    assert {h["metadata"]["filename"] for h in json.loads(stdout)["hits"]} == {"scotus.pdf"}
    code, stdout = run(
        "search",
        cli_index,
        "x",
        "-k",
        "50",
        "--filter",
        '{"filename": {"$in": ["multi.pdf"]}}',
        "--json",
    )
    assert code == 0
    assert {h["metadata"]["filename"] for h in json.loads(stdout)["hits"]} == {"multi.pdf"}


def test_info_verify_show_delete(cli_index: Path, tmp_path: Path):
    code, stdout = run("info", cli_index, "--json")
    assert code == 0
    info = json.loads(stdout)
    assert info["model_id"] == "tiny-colqwen2" and info["compressor"] == "sap"
    assert info["documents"] == 2 and info["pages"] > 2

    code, stdout = run("verify", cli_index, "--json")
    assert code == 0 and json.loads(stdout)["ok"] is True

    doc = info["document_list"][0]["doc_id"]
    out = tmp_path / "page.png"
    code, stdout = run("show", cli_index, doc, "1", "--out", out, "--json")
    assert code == 0, stdout
    assert json.loads(stdout)["layout"] == "kept"
    assert Image.open(out).size[0] > 100

    copy = tmp_path / "copy"
    shutil.copytree(cli_index, copy)
    code, stdout = run("delete", copy, doc, "--json")
    assert code == 0 and json.loads(stdout)["pages_deleted"] >= 1
    code, _ = run("delete", copy, doc)
    assert code == 1
    code, stdout = run("info", copy, "--json")
    assert json.loads(stdout)["documents"] == 1

    code, stdout = run("optimize", copy, "--codes", "2bit", "--json")
    assert code == 0, stdout
    assert json.loads(stdout)["codes"] == "2bit" and json.loads(stdout)["indexed_pages"] >= 1
    code, stdout = run("info", copy, "--recall", "--json")
    candidate = json.loads(stdout)["candidate_index"]
    assert candidate["k"] >= 1 and candidate["recall@10"] == 1.0  # tiny: every page reranked
    assert candidate["params_from"] == "measured" and candidate["tuned"]["target"] == 0.97
    assert run("optimize", copy, "--codes", "3bit")[0] == 2
    code, stdout = run("optimize", copy, "--recall-target", "0.99", "--json")
    assert code == 0 and json.loads(stdout)["tuned"]["target"] == 0.99  # kept in the index
    assert json.loads(run("info", copy, "--json")[1])["candidate_index"]["recall_target"] == 0.99
    assert run("optimize", copy, "--recall-target", "1.5")[0] == 2


def test_index_without_fp16_vectors(shared_data: Path, tmp_path: Path):
    """`--codes 2bit --no-fp16` keeps no fp16 rows once its codes are trained: search, verify
    and info work on the codes."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("scotus-transcript-p1.pdf", "nics-background-checks-2015-11.pdf"):  # 1 page each
        shutil.copy(shared_data / "pdfs" / "gov" / name, folder / name)
    path = tmp_path / "small"
    base = ["index", folder, "--index", path, "--model", "tiny-colqwen2", "--json"]
    assert run(*base, "--no-fp16", "--codes", "none")[0] == 2  # nothing to rerank on
    code, stdout = run(*base, "--codes", "2bit", "--no-fp16")
    assert code == 0, stdout
    # far fewer vectors than codes_min_tokens: kept as staged fp16 rows, no codes trained yet
    assert any((path / "segments").iterdir())
    staged = json.loads(run("info", path, "--json")[1])
    assert staged["candidate_index"] is None and staged["staged_vectors"] > 0
    assert run("optimize", path, "--json")[0] == 0  # trains the codes now, on every page
    assert not any((path / "segments").iterdir())  # the staged rows are gone
    code, stdout = run("info", path, "--json")
    info = json.loads(stdout)
    assert info["staged_vectors"] == 0
    assert info["pages"] >= 2 and info["candidate_index"]["codes"] == "2bit"
    assert info["candidate_index"]["bytes_per_page"] > 0
    code, stdout = run("search", path, "page", "--json")
    assert code == 0 and json.loads(stdout)["hits"], stdout
    assert json.loads(run("verify", path, "--json")[1])["ok"] is True
    assert run("optimize", path, "--codes", "none")[0] != 0  # would drop the only copy


def test_default_layout_then_codes_in_place(cli_index: Path, tmp_path: Path):
    """A new index keeps fp16 rows while small (the layout by size, kept in the index);
    `optimize --codes 2bit --no-fp16` converts it in place, and there is no way back."""
    info = json.loads(run("info", cli_index, "--json")[1])
    assert info["vector_layout"] == {"rule": "auto", "fp16": True, "codes": "4bit"}
    copy = tmp_path / "copy"
    shutil.copytree(cli_index, copy)
    before = json.loads(run("search", copy, "supreme court", "-k", "20", "--json")[1])["hits"]
    code, stdout = run("optimize", copy, "--codes", "2bit", "--no-fp16", "--json")
    assert code == 0 and json.loads(stdout)["codes"] == "2bit", stdout
    assert not any((copy / "segments").iterdir())
    info = json.loads(run("info", copy, "--json")[1])
    assert info["vector_layout"] == {"rule": "auto", "fp16": False, "codes": "2bit"}
    assert json.loads(run("verify", copy, "--json")[1])["ok"] is True
    after = json.loads(run("search", copy, "supreme court", "-k", "20", "--json")[1])["hits"]
    # every page still answers (the random tiny model's near-tied order may move; the
    # tolerance of the codes is checked on clustered vectors in tests/store/test_store_layout.py)
    assert {h["page_id"] for h in after} == {h["page_id"] for h in before}
    back = runner.invoke(app, ["optimize", str(copy), "--fp16"])
    assert back.exit_code == 1 and "cannot be rebuilt" in back.stderr
    fixed = tmp_path / "fixed"
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(Path(info["document_list"][0]["source"]), folder / "doc.pdf")
    code, _ = run("index", folder, "--index", fixed, "--model", "tiny-colqwen2", "--fp16")
    assert code == 0
    info = json.loads(run("info", fixed, "--json")[1])
    assert info["vector_layout"] == {"rule": "fixed", "fp16": True, "codes": "none"}


def test_missing_index_and_partial_failure_exit_codes(tmp_path: Path, shared_data: Path):
    code, _ = run("search", tmp_path / "nope", "q")
    assert code == 1
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder / "good.pdf")
    (folder / "bad.pdf").write_bytes(b"not a pdf at all")
    code, stdout = run(
        "index", folder, "--index", tmp_path / "i", "--model", "tiny-colqwen2", "--json"
    )
    assert code == 3
    report = json.loads(stdout)
    assert [Path(f["path"]).name for f in report["failures"]] == ["bad.pdf"]
    assert report["pages_indexed"] > 0


def test_missing_model_says_how_to_fix(tmp_path: Path, shared_data: Path):
    result = runner.invoke(
        app,
        [
            "index",
            str(shared_data / "pdfs" / "edge" / "multi_page.pdf"),
            "--index",
            str(tmp_path / "i"),
            "--model",
            "vidore/colqwen2-v1.0",
        ],
    )
    assert result.exit_code == 1
    assert "tiny-colqwen2" in result.stderr


def test_ask_without_llm_is_a_clear_error(cli_index: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("VRAG_LLM", raising=False)
    result = runner.invoke(app, ["ask", str(cli_index), "what is argued?"])
    assert result.exit_code == 1
    assert "--llm" in result.stderr


def test_ask_without_the_langchain_integration_says_what_to_install(
    cli_index: Path, monkeypatch: pytest.MonkeyPatch
):
    for module in ("langchain_vrag_compress", "langchain_vrag_compress.qa"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails, even if loaded before
    result = runner.invoke(app, ["ask", str(cli_index), "what?", "--llm", "fake:model"])
    assert result.exit_code == 1
    assert "vrag-compress[ask]" in result.stderr and "Traceback" not in result.stderr


def use_the_langchain_plugin(monkeypatch: pytest.MonkeyPatch, model: object) -> None:
    """Chat models as an installed `langchain-vrag-compress` provides them: through the entry
    point its pyproject declares (read from there), with LangChain's loader answering ``model``."""
    from importlib.metadata import EntryPoint

    from vrag_compress import answering

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    qa = pytest.importorskip("langchain_vrag_compress.qa")
    pyproject = Path(__file__).resolve().parents[2] / "integrations/langchain/pyproject.toml"
    group = answering.CHAT_MODEL_PLUGINS
    declared = tomllib.loads(pyproject.read_text())["project"]["entry-points"][group]
    plugins = [EntryPoint(name, value, group) for name, value in declared.items()]
    monkeypatch.setattr(answering, "entry_points", lambda group: plugins)
    monkeypatch.setattr(qa, "load_chat_model", lambda spec: model)


def test_ask_sends_page_images_and_cites_pages(cli_index: Path, monkeypatch: pytest.MonkeyPatch):
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    seen: list = []

    class RecordingChat(GenericFakeChatModel):
        def stream(self, messages, *args, **kwargs):  # noqa: ANN001
            seen.append(messages)
            return super().stream(messages, *args, **kwargs)

    fake = RecordingChat(messages=iter([AIMessage(content="The petitioner argues X [2].")]))
    use_the_langchain_plugin(monkeypatch, fake)
    code, stdout = run(
        "ask", cli_index, "what is argued?", "--llm", "fake:model", "-k", "2", "--json"
    )
    assert code == 0, stdout
    payload = json.loads(stdout)
    assert payload["answer"] == "The petitioner argues X [2]."
    assert [c["ref"] for c in payload["citations"]] == [2]  # only the page the answer cites
    assert [p["ref"] for p in payload["pages"]] == [1, 2]
    cited = payload["citations"][0]
    assert {"doc_id", "page_no", "page", "source", "score"} <= set(cited)
    assert cited["page_id"] == payload["pages"][1]["page_id"]
    human = seen[-1][-1]
    images = [b for b in human.content if b["type"] == "image"]
    assert len(images) == 2 and images[0]["base64"] and images[0]["mime_type"] == "image/jpeg"
    assert human.content[-1]["text"] == "Question: what is argued?"


def test_methods_lists_every_compressor():
    code, stdout = run("methods", "--json")
    assert code == 0
    names = {row["name"] for row in json.loads(stdout)}
    assert {"identity", "sap", "uot", "random", "eos", "adaptive-eos", "cluster", "pool"} <= names


def test_index_with_a_calibration_profile(tmp_path: Path, shared_data: Path):
    from vrag_compress.compress.profiles import CalibrationProfile

    profile = CalibrationProfile(model_id="tiny-colqwen2", n_layers=2, window=(1,))
    profile.save(tmp_path / "profile.json")
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    code, stdout = run(
        "index",
        pdf,
        "--index",
        tmp_path / "i",
        "--model",
        "tiny-colqwen2",
        "--profile",
        tmp_path / "profile.json",
        "--ocr",
        "never",
        "--json",
    )
    assert code == 0, stdout
    code, stdout = run("info", tmp_path / "i", "--json")
    assert json.loads(stdout)["compressor_params"]["layers"] == [1]
    code, _ = run(
        "index",
        pdf,
        "--index",
        tmp_path / "j",
        "--method",
        "uot",
        "--profile",
        tmp_path / "profile.json",
    )
    assert code == 2


def test_search_with_an_unloadable_model_fails_cleanly(tmp_path: Path):
    from vrag_compress import VisualIndex

    class NamedOnly:  # records a model id that is not available offline
        model_id, dim, n_layers = "vidore/not-downloaded", 8, 2

    VisualIndex.create(tmp_path / "i", encoder=NamedOnly(), compressor="random").close()
    result = runner.invoke(app, ["search", str(tmp_path / "i"), "anything"])
    assert result.exit_code == 1
    assert "not-downloaded" in result.stderr and "Traceback" not in result.stderr


def test_reindexing_an_existing_index_keeps_its_model_and_warns_on_ignored_options(
    cli_index: Path, shared_data: Path
):
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    result = runner.invoke(app, ["index", str(pdf), "--index", str(cli_index), "--ratio", "0.5"])
    assert result.exit_code == 0, result.stderr
    assert "--ratio ignored" in result.stderr


def test_a_store_without_a_candidate_index_says_so(cli_index: Path, tmp_path: Path):
    pytest.importorskip("qdrant_client")
    from vrag_compress.index import VisualIndex, VisualIndexError
    from vrag_compress.store import LocalStore, OptimizableStore
    from vrag_compress.store.qdrant.store import QdrantStore

    assert issubclass(LocalStore, OptimizableStore)
    assert not issubclass(QdrantStore, OptimizableStore)
    folder = tmp_path / "idx"
    shutil.copytree(cli_index, folder)
    url = f"qdrant+local://{tmp_path / 'q'}?collection=idx"
    assert run("migrate", folder, url)[0] == 0
    with VisualIndex.open(folder, store=url) as index:
        assert index.info()["candidate_index"] is None
        with pytest.raises(VisualIndexError, match="keeps no candidate index"):
            index.optimize()
