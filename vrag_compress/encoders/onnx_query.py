"""Queries without torch: a model's query path exported to ONNX, run with ONNX Runtime.

Why: a search on the CPU needs one short forward of the query encoder, yet loading torch and
transformers takes seconds and hundreds of MB. `vrag export-onnx` exports the query path of an
index's model once, into the model cache; every later search with that model on the CPU tokenizes
with the `tokenizers` library and runs the graph with `onnxruntime`, neither of which imports torch.

Two kinds of export (``$VRAG_CACHE_DIR/onnx/<model>-<digest>/``, each with ``query.onnx``,
``tokenizer.json`` and ``query.json``):

- **text** (MiniLM, a local BERT-style folder): token ids -> last hidden state, plus
  ``projection.npy`` when the model projects. Queries keep every non-padding token, as
  `TextTokenEncoder.encode_queries` does.
- **col** (ColSmol/ColIdefics3, ColPali, ColQwen2, ...): the Col* model's own forward on text
  only (decoder, projection, normalisation). The processor's query template (prefix, the ten
  augmentation tokens, the tokenizer's special tokens, padding side) is recorded as strings and
  ids and replayed with `tokenizers`; the export is refused unless the ids equal the processor's
  on `TEMPLATE_CHECKS` (hostile and unicode queries). Vectors are every non-padding row,
  renormalised in float32, as `ColEncoder.encode_queries` does.

An export belongs to one model: its folder is named by a digest of the model's identity (the id,
and the absolute folder of a local one), and ``query.json`` records that identity and the
weights' fingerprint (`encoders.fingerprint`). A search uses it only when both still match and
its files load and agree with the index's width; otherwise it warns (`OnnxExportWarning`) and
encodes with torch, so a wrong or damaged export never changes results or breaks a search.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.encoders.base import EncodingError, unit_rows
from vrag_compress.encoders.errors import (
    EncoderInputError,
    EncoderLoadError,
    check_text_queries,
)
from vrag_compress.encoders.fingerprint import model_fingerprint, model_identity
from vrag_compress.encoders.tiny import cache_root
from vrag_compress.threads import thread_budget

EXPORT_FILES = ("query.onnx", "tokenizer.json", "query.json")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
AUGMENTATION_TOKENS = 10
"""colpali-engine's ``process_queries`` appends its augmentation token this many times."""
TEMPLATE_CHECKS = (
    "what is the operating cost",
    "x",
    "  leading, trailing and  double  spaces  ",
    "Ünïcödé ñ 日本語の質問 🙂👩‍👩‍👧 مرحبا",
    "e\u0301 (decomposed) vs \u00e9, soft\u00adhyphen, zero\u200bwidth, \ufeffBOM",
    "<end_of_utterance> <|im_start|> <|endoftext|> <pad> <bos> <eos> <unk>",
    "tabs\tand\nnew\r\nlines \x00 \x1b[31m control",
    "A" * 300 + " " + "long query " * 120,
)
"""Queries whose token ids must equal the processor's before a Col* export is kept."""


class OnnxExportWarning(UserWarning):
    """A model's ONNX export was not used (another model's, other weights, damaged): the
    query is encoded with torch instead."""


class OnnxExportError(EncoderLoadError):
    """The ONNX export in a folder cannot serve the model asked for (the reason is the text)."""


def export_dir(model_id: str) -> Path:
    """Where the export of `model_id` lives (one per model, shared by every index using it).

    The readable slug is lossy (``/m/a_b`` and ``/m/a/b`` give one slug), so the digest of the
    model's identity keeps two models, or one relative id in two projects, apart."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", str(model_id)).strip("_")[-48:] or "model"
    digest = hashlib.sha256(model_identity(model_id).encode()).hexdigest()[:24]
    return cache_root().parent / "onnx" / f"{slug}-{digest}"


def has_export(model_id: str) -> bool:
    folder = export_dir(model_id)
    return all((folder / name).is_file() for name in EXPORT_FILES)


def export_queries(encoder: Any, out: Path | None = None) -> Path:
    """Export the query path of a page-text encoder or a Col* encoder; needs torch and onnx.

    Written into a temporary folder and renamed into place, so a reader never sees half of it."""
    try:
        import onnx  # noqa: F401  (torch's exporter writes through it)
    except ImportError as error:
        raise EncoderLoadError(
            "exporting needs the onnx package: pip install 'vrag-compress[onnx]'"
        ) from error
    if hasattr(encoder, "processor") and hasattr(encoder, "family"):
        return _write_export(encoder, out, _col_export)
    text = getattr(encoder, "text", None)
    if text is None or not hasattr(text, "model") or not hasattr(text, "tokenizer"):
        raise EncoderLoadError(
            f"{getattr(encoder, 'model_id', encoder)!r} has no exportable query path; text "
            "models (minilm, a local BERT-style folder) and Col* checkpoints can be exported"
        )
    return _write_export(encoder, out, _text_export)


def _write_export(encoder: Any, out: Path | None, fill: Callable[[Any, Path], dict]) -> Path:
    """`fill` writes the graph and tokenizer into a private folder and returns the manifest."""
    import shutil
    import tempfile

    import torch

    fingerprint = model_fingerprint(encoder.model_id)
    if fingerprint is None:
        raise EncoderLoadError(
            f"the weight files of {encoder.model_id!r} are not found here, so an export could "
            "not be checked against them later; export a model folder, a cached hub id or a "
            "tiny model"
        )
    target = out or export_dir(encoder.model_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=target.parent))
    try:
        manifest = {
            "model_id": encoder.model_id,
            "identity": model_identity(encoder.model_id),
            "fingerprint": fingerprint,
            "dim": int(encoder.dim),
            **fill(encoder, work),
        }
        manifest["torch"] = torch.__version__
        (work / "query.json").write_text(json.dumps(manifest, indent=2))
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _text_export(encoder: Any, work: Path) -> dict[str, Any]:
    text = encoder.text
    sample = text.tokenizer(["a query", "a longer sample query"], padding=True, return_tensors="pt")
    feeds = {name: sample[name] for name in INPUTS}
    _export_graph(text.model, feeds, "hidden", work / "query.onnx", hidden_state=True)
    text.tokenizer.backend_tokenizer.save(str(work / "tokenizer.json"))
    if text.projection is not None:
        np.save(work / "projection.npy", text.projection)
    pad = int(text.tokenizer.pad_token_id or 0)
    return {"kind": "text", "max_length": int(text.max_length), "pad_id": pad}


def _col_export(encoder: Any, work: Path) -> dict[str, Any]:
    """The Col* model's forward on query tokens, and its query template checked id by id."""
    tokenizer = encoder.processor.tokenizer
    tokenizer.backend_tokenizer.save(str(work / "tokenizer.json"))
    template = col_query_template(encoder)
    _check_template(encoder, template, work / "tokenizer.json")
    sample = encoder.process_queries(["a query", "a longer sample query"])
    feeds = {name: sample[name] for name in INPUTS if name in sample}
    constants = {}
    for name in feeds:
        if name in ("input_ids", "attention_mask"):
            continue
        values = feeds[name].unique().tolist()
        if len(values) != 1:
            raise EncoderLoadError(
                f"{encoder.model_id}: query input {name!r} varies by token; not exportable"
            )
        constants[name] = int(values[0])
    _export_graph(encoder.model, feeds, "embeddings", work / "query.onnx", hidden_state=False)
    return {"kind": "col", "family": encoder.family.name, **template, "constants": constants}


def col_query_template(encoder: Any) -> dict[str, Any]:
    """What colpali-engine's ``process_queries`` wraps around a query, as plain data.

    ``query_prefix + query + augmentation token × 10``, and ColPali's ``process_texts`` puts the
    BOS token in front; the tokenizer's own post-processor (saved in ``tokenizer.json``) adds the
    rest. ``refused``: the image placeholder, which the processor rejects in a query without an
    image (Idefics3, Qwen2-VL), so the ONNX path rejects it too."""
    processor = encoder.processor
    tokenizer = processor.tokenizer
    prefix = str(getattr(processor, "query_prefix", "") or "")
    if encoder.family.name == "colpali":
        prefix = str(tokenizer.bos_token) + prefix
    image_token = str(tokenizer.convert_ids_to_tokens(int(encoder.image_token_id)))
    try:
        processor.process_queries([image_token])
        refused: list[str] = []
    except ValueError:
        refused = [image_token]
    return {
        "prefix": prefix,
        "suffix": str(processor.query_augmentation_token) * AUGMENTATION_TOKENS,
        "pad_id": int(tokenizer.pad_token_id),
        "padding_side": str(tokenizer.padding_side),
        "refused": refused,
    }


def _check_template(encoder: Any, template: dict[str, Any], tokenizer_file: Path) -> None:
    """Refuse the export unless the replayed template gives the processor's ids exactly."""
    from tokenizers import Tokenizer

    replay = Tokenizer.from_file(str(tokenizer_file))
    for query in TEMPLATE_CHECKS:
        batch = encoder.processor.process_queries([query])
        mask = batch["attention_mask"][0].bool()
        want = batch["input_ids"][0][mask].tolist()
        got = replay.encode(template["prefix"] + query + template["suffix"]).ids
        if got != want:
            raise EncoderLoadError(
                f"{encoder.model_id}: the processor's query template could not be reproduced "
                f"with the tokenizers library (query {query[:40]!r}: {len(got)} ids against "
                f"{len(want)}); not exported"
            )


def _export_graph(
    model: Any, feeds: dict[str, Any], output: str, file: Path, *, hidden_state: bool
) -> None:
    """Trace `model` on `feeds` with dynamic batch and length (eager attention traces).

    ``hidden_state``: export ``.last_hidden_state`` of the output (a text backbone) rather than
    the output itself (a Col* model, whose forward returns its projected vectors)."""
    import torch

    names = list(feeds)

    class Forward(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            result = self.inner(**dict(zip(names, inputs, strict=True)))
            return result.last_hidden_state if hidden_state else result

    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    axes = {name: {0: "batch", 1: "tokens"} for name in (*names, output)}
    try:
        with warnings.catch_warnings(), _silent_stdout(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer notes about shapes the dynamic axes cover
            torch.onnx.export(
                Forward(model).eval(),
                tuple(feeds[name] for name in names),
                str(file),
                input_names=names,
                output_names=[output],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
    except torch.onnx.errors.OnnxExporterError as error:  # an operator ONNX has no export for
        reason = str(error).strip().splitlines()[0]
        raise EncoderLoadError(f"torch's ONNX exporter cannot export it: {reason}") from error
    finally:
        model.set_attn_implementation(previous)


@contextmanager
def _silent_stdout() -> Iterator[None]:
    """Keep file descriptor 1 quiet: torch's TorchScript exporter prints the whole traced graph
    there when an operator fails (its log switch is always on), which would corrupt ``--json``."""
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _session(file: Path) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    threads = thread_budget()
    if threads is not None:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])


class OnnxTextQueryEncoder:
    """Query vectors from a text model's ONNX export: `tokenizers` + `onnxruntime`, no torch."""

    reads = "text"

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        manifest = json.loads((folder / "query.json").read_text())
        self.model_id = str(manifest["model_id"])
        self.dim = int(manifest["dim"])
        self.max_length = int(manifest["max_length"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.enable_padding(pad_id=int(manifest["pad_id"]))
        projection = folder / "projection.npy"
        self.projection = np.load(projection) if projection.is_file() else None
        self.session = _session(folder / "query.onnx")
        width = _output_width(self.session, "hidden", INPUTS)
        if self.projection is None:
            _check_width(width, self.dim, "the graph's output")
        elif self.projection.shape != (self.dim, width):
            raise OnnxExportError(
                f"projection.npy is {self.projection.shape}, the graph gives {width} and the "
                f"export says {self.dim}"
            )

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        """One [M, D] array of unit rows per query: every non-padding token, as the torch path."""
        check_text_queries(queries)
        encodings = self.tokenizer.encode_batch(list(queries))
        feeds = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        hidden = self.session.run(["hidden"], feeds)[0]
        out = []
        for row, mask in zip(hidden, feeds["attention_mask"].astype(bool), strict=True):
            x = row[mask].astype(np.float32)
            if self.projection is not None:
                x = x @ self.projection.T
            out.append(unit_rows(x))
        return out

    def token_labels(self, query: str) -> list[str]:
        """The query's tokens as text (for explanations), without a transformers tokenizer."""
        return list(self.tokenizer.encode(query).tokens)


class OnnxColQueryEncoder:
    """Query vectors from a Col* model's ONNX export: the processor's query template replayed
    with `tokenizers`, the model's text forward in `onnxruntime`; no torch."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        manifest = json.loads((folder / "query.json").read_text())
        self.model_id = str(manifest["model_id"])
        self.dim = int(manifest["dim"])
        self.prefix = str(manifest["prefix"])
        self.suffix = str(manifest["suffix"])
        self.refused = [str(token) for token in manifest["refused"]]
        self.constants = {str(k): int(v) for k, v in manifest["constants"].items()}
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_truncation()  # colpali-engine does not cut queries either
        self.tokenizer.enable_padding(
            direction=str(manifest["padding_side"]), pad_id=int(manifest["pad_id"])
        )
        self.session = _session(folder / "query.onnx")
        given = ("input_ids", "attention_mask", *self.constants)
        _check_width(_output_width(self.session, "embeddings", given), self.dim, "the graph")

    def query_ids(self, queries: list[str]) -> list[list[int]]:
        """Each query's token ids as the processor makes them (prefix, augmentation, specials)."""
        return [self.tokenizer.encode(self._text(q, i)).ids for i, q in enumerate(queries)]

    def _text(self, query: Any, i: int) -> str:
        if not isinstance(query, str):
            raise EncoderInputError(f"query {i} is a {type(query).__name__}, expected str")
        for token in self.refused:
            if token in query:
                raise EncoderInputError(
                    f"query {i} contains {token!r}, which {self.model_id} reserves for page "
                    "images; remove it from the query"
                )
        return self.prefix + query + self.suffix

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        """One [M, D] float32 array of unit rows per query: every non-padding token,
        augmentation included, as `ColEncoder.encode_queries` gives them."""
        if isinstance(queries, str):
            raise EncoderInputError("encode_queries takes a list of strings, got a single string")
        encodings = self.tokenizer.encode_batch([self._text(q, i) for i, q in enumerate(queries)])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        names = {i.name for i in self.session.get_inputs()}
        feeds |= {k: np.full_like(ids, v) for k, v in self.constants.items() if k in names}
        embeddings = self.session.run(["embeddings"], feeds)[0]
        out = []
        for b, (rows, keep) in enumerate(zip(embeddings, mask.astype(bool), strict=True)):
            vectors = rows[keep].astype(np.float32)
            if not np.isfinite(vectors).all():
                raise EncodingError(f"the model produced non-finite vectors for query {b}")
            out.append(unit_rows(vectors))
        return out

    def token_labels(self, query: str) -> list[str]:
        """The query's tokens as text (byte-level marks shown as spaces), for explanations."""
        tokens = self.tokenizer.encode(self._text(query, 0)).tokens
        return [t.replace("\u0120", " ").replace("\u2581", " ") for t in tokens]


def _output_width(session: Any, output: str, given: tuple[str, ...]) -> Any:
    """The last dimension of the graph's `output`, after checking it takes only `given` inputs."""
    extra = sorted({i.name for i in session.get_inputs()} - set(given))
    if extra:
        raise OnnxExportError(f"the graph wants inputs {extra} that the export never feeds")
    outputs = {o.name: o.shape for o in session.get_outputs()}
    if output not in outputs:
        raise OnnxExportError(f"the graph has no output {output!r} (it has {sorted(outputs)})")
    return outputs[output][-1]


def _check_width(width: Any, dim: int, what: str) -> None:
    if width != dim:
        raise OnnxExportError(f"{what} gives vectors of width {width}, the export says {dim}")


def open_export(
    model_id: str, *, dim: int | None = None, fingerprint: str | None = None
) -> OnnxTextQueryEncoder | OnnxColQueryEncoder:
    """The checked export of `model_id`; `OnnxExportError` says why it cannot serve it.

    Checked: the identity and weights fingerprint recorded at export against the model's now
    (`fingerprint`, the one an index recorded, stands in when the model's files are not here),
    the manifest, tokenizer and graph load, and the vectors' width equals ``query.json``'s
    ``dim`` and, when given, `dim` (the index's). ImportError: onnxruntime is missing."""
    folder = export_dir(model_id)
    try:
        manifest = json.loads((folder / "query.json").read_text())
    except (OSError, ValueError) as error:
        raise OnnxExportError(f"query.json cannot be read ({type(error).__name__})") from error
    if not isinstance(manifest, dict):
        raise OnnxExportError("query.json is not a JSON object")
    if manifest.get("identity") != model_identity(model_id):
        raise OnnxExportError(f"it was exported from another model ({manifest.get('model_id')!r})")
    expected = model_fingerprint(model_id) or fingerprint
    if expected is None:
        raise OnnxExportError("the model's weight files are not here to check it against")
    if manifest.get("fingerprint") != expected:
        raise OnnxExportError("it was exported from other weights than the model has now")
    if dim is not None and manifest.get("dim") != dim:
        raise OnnxExportError(f"its vectors are {manifest.get('dim')} wide, the index's {dim}")
    try:
        if manifest.get("kind", "text") == "col":
            return OnnxColQueryEncoder(folder)
        return OnnxTextQueryEncoder(folder)
    except (ImportError, OnnxExportError):
        raise
    except Exception as error:  # a truncated graph, a broken tokenizer, missing or bad keys
        reason = " ".join(str(error).split())[:200]
        raise OnnxExportError(f"it is damaged ({type(error).__name__}: {reason})") from error


def load_onnx_query_encoder(
    model_id: str, *, dim: int | None = None, fingerprint: str | None = None
) -> OnnxTextQueryEncoder | OnnxColQueryEncoder | None:
    """The exported query encoder of `model_id`, or None: silently when it has no export or
    the ONNX runtime is missing, with an `OnnxExportWarning` when the export fails
    `open_export`'s checks. None means the torch path answers, as without an export."""
    folder = export_dir(model_id)
    if not folder.is_dir():
        return None
    try:
        return open_export(model_id, dim=dim, fingerprint=fingerprint)
    except ImportError:
        return None
    except OnnxExportError as error:
        warnings.warn(
            f"the ONNX query export in {folder} is not used: {error}. Queries of {model_id!r} "
            f"are encoded with torch; `vrag export-onnx {model_id}` exports it again.",
            OnnxExportWarning,
            stacklevel=2,
        )
        return None
