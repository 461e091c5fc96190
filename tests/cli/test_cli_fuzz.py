"""Hostile input on every `vrag` verb's arguments and options, the way the schemathesis suite
covers the API: each case is a working command line with one value replaced by something
hostile (integers at the edges, huge, empty, NUL, bidi and path-like strings, URLs of unknown
schemes), run against a copy of a one-page tiny-model index. A case passes when the command
ends with a documented exit code (0, 1, 2, 3) and no traceback: a bad value is a one-line error.

The values come from each parameter's declared type, read from the Typer app, so a new option
is fuzzed without a change here. `vrag serve` and `vrag mcp` start servers (their inputs are
fuzzed over HTTP by the serve tests) and `vrag bench` runs benchmarks; they are left out.

The quick run draws a fixed sample of cases per verb (hypothesis, derandomized); the `slow`
run tries every value on every parameter.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from typer.testing import CliRunner

from vrag_compress.cli import app

runner = CliRunner()
EXIT_CODES = {0, 1, 2, 3}  # success, failed, bad usage, partly failed (see cli/common.py)
LEFT_OUT = {"serve", "mcp", "bench"}  # servers and benchmarks: see the module docstring

HOSTILE_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "a" * 5000,
    "d/" * 2100,
    "~nosuchuser/x",
    "\u202etxt.exe",
    "\udcff\udcfe",
    "é中文🙂",
    "-",
    "--",
    "s3://bucket/x",
    "file:///any/dir",
    "qdrant+local://../../../../../../proc/nope",  # past the root, into a folder none can make
    "qdrant://256.1.1.1:99999/c",
    "/proc/nope/x.json",
    "/dev/null",
    "../../../../../../../proc/self/nope",  # never a real file: cases write where they point
    "{",
    '{"a":' * 300,
    "NaN",
    "=",
    "st:/nope",
]
HOSTILE_INT = [
    "-1",
    "0",
    "2147483648",
    "9223372036854775807",
    "18446744073709551616",
    "-9223372036854775809",
    "1e3",
    "",
]
HOSTILE_FLOAT = ["nan", "inf", "-inf", "-1", "0", "1e308", "1e-320", "x"]


# ----------------------------------------------------------------------------- the cases
def verbs() -> dict[str, Any]:
    """The `vrag` verbs as Click commands, read from the Typer app."""
    group = typer.main.get_command(app)
    return {n: c for n, c in group.commands.items() if n not in LEFT_OUT}  # type: ignore[attr-defined]


def hostile_values(param: Any) -> list[str]:
    """What to give a parameter, by its declared type (flags take none)."""
    annotation = getattr(param, "type_descriptor", None)
    kind = getattr(annotation, "annotation", str)
    kind = next((a for a in get_args(kind) if a is not type(None)), kind)  # list[X], X | None
    if getattr(param, "is_flag", False):
        return []
    if kind is int:
        return HOSTILE_INT
    if kind is float:
        return HOSTILE_FLOAT
    return HOSTILE_TEXT


def base_args(verb: str, env: dict[str, Path]) -> dict[str, list[str]]:
    """A working command line per verb, by parameter name ("" keys the positional ones)."""
    idx, tmp, png = str(env["index"]), env["tmp"], str(env["png"])
    out = str(tmp / "out")
    return {
        "index": {"paths": [png], "index_dir": ["--index", out + "/new"],
                  "model": ["--model", "tiny-colqwen2"]},
        "methods": {},
        "search": {"index_dir": [idx], "query": ["court"], "mode": ["--mode", "text"]},
        "ask": {"index_dir": [idx], "question": ["who argued?"]},
        "info": {"index_dir": [idx]},
        "optimize": {"index_dir": [idx]},
        "verify": {"index_dir": [idx]},
        "delete": {"index_dir": [idx], "document": ["nosuch.pdf"]},
        "show": {"index_dir": [idx], "document": ["scotus-transcript-p1.pdf"], "page": ["1"],
                 "out_path": ["--out", out + "/p.png"]},
        "estimate": {"source": [idx], "sample": ["--sample", "2"], "methods": ["--methods", "sap"],
                     "ratios": ["--ratios", "0.5"]},
        "calibrate": {"data": [str(env["pairs"])], "model": ["--model", "tiny-colqwen2"],
                      "pairs": ["--pairs", "2"], "out_path": ["--out", out + "/profile.json"]},
        "migrate": {"src": [idx], "dst": [out + "/copy"], "verify_queries": ["--verify-queries",
                    "1"]},
        "export-onnx": {"target": [str(tmp / "no-such-model")]},
    }[verb]  # fmt: skip


def command_line(command: Any, verb: str, env: dict[str, Path], name: str, value: str) -> list[str]:
    """The working command line of ``verb`` with parameter ``name`` given ``value``."""
    args = base_args(verb, env)
    param = next(p for p in command.params if p.name == name)
    if param.param_type_name == "argument":
        args[name] = [value]
    else:
        args[name] = [max(param.opts, key=len), value]  # the next token, even "-1" or "--"
    positional = [p.name for p in command.params if p.param_type_name == "argument"]
    line = [verb]
    for key, tokens in args.items():
        if key not in positional:
            line += tokens
    line.append("--")  # what follows is positional, even when it starts with "-"
    for key in positional:
        line += args.get(key, [])
    return line


def all_cases() -> Iterator[tuple[str, str, str]]:
    for verb, command in verbs().items():
        for param in command.params:
            for value in hostile_values(param):
                yield verb, param.name, value


def run_case(env: dict[str, Path], verb: str, name: str, value: str) -> None:
    command = verbs()[verb]
    line = command_line(command, verb, env, name, value)
    shown = f"vrag {verb} --{name}={value[:60]!r}"
    with watchdog(shown), contextlib.chdir(env["cwd"]):  # relative values land in the tmp
        result = runner.invoke(app, line, env={"VRAG_LLM": "", "COLUMNS": "200"})
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    problem = f"{type(result.exception).__name__}: {str(result.exception)[:300]}"
    assert not crashed, f"{shown}: {problem}"
    assert result.exit_code in EXIT_CODES, f"{shown}: exit {result.exit_code}\n{result.output}"
    assert "Traceback" not in result.output, f"{shown}:\n{result.output}"


class CaseHung(Exception):
    """A case still running after `HANG_S`: a value that makes a command work for ever."""


HANG_S = 300  # far past any case's work: only a command that never ends meets it


@contextlib.contextmanager
def watchdog(shown: str) -> Iterator[None]:
    """Raise `CaseHung` inside a case that runs past `HANG_S` (so the suite reports the value
    instead of never ending)."""

    def hung(signum: int, frame: Any) -> None:
        raise CaseHung(f"{shown} ran for {HANG_S} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def env(law_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("fuzz")
    with pytest.MonkeyPatch.context() as patch:
        yield _env(law_index, tmp, patch)


def _env(law_index: Path, tmp: Path, patch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The fuzzed commands' files, and a model cache of their own: a case that gets through
    `export-onnx` writes its export there, never into the user's cache (where every later
    query of that model would take the ONNX path). The tiny checkpoints are shared read-only."""
    from vrag_compress.encoders.tiny import CACHE_ENV, cache_root

    cache = tmp / "cache"
    cache.mkdir()
    (cache / "tiny").symlink_to(cache_root(), target_is_directory=True)
    patch.setenv(CACHE_ENV, str(cache))
    index = tmp / "index"
    shutil.copytree(law_index, index)
    png = tmp / "page.png"
    Image.fromarray(np.full((64, 48, 3), 200, np.uint8)).save(png)
    pairs = tmp / "pairs.jsonl"
    pairs.write_text(json.dumps({"query": "court", "image": str(png)}) + "\n")
    cwd = tmp / "cwd" / "a" / "b"  # where cases run: ../.. stays inside the temporary folder
    cwd.mkdir(parents=True)
    return {"index": index, "tmp": tmp, "png": png, "pairs": pairs, "cwd": cwd}


# ----------------------------------------------------------------------------- the fuzz
CASES = list(all_cases())
EXAMPLES = {"index": 3, "calibrate": 4, "export-onnx": 4, "estimate": 6}
"""Cases per verb in the quick run, fewer where a case that gets through loads a model."""


@pytest.mark.parametrize("verb", sorted({case[0] for case in CASES}))
def test_hostile_values_give_an_error_line_not_a_traceback(env: dict[str, Path], verb: str) -> None:
    ours = [c for c in CASES if c[0] == verb]

    @settings(
        max_examples=EXAMPLES.get(verb, 8),
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(ours))
    def fuzz(case: tuple[str, str, str]) -> None:
        run_case(env, *case)

    fuzz()


FULL_SWEEP_ENV = "VRAG_FUZZ_EVERY_CASE"
"""Set to 1 for the whole sweep (1,552 cases; `index` and `estimate` load a model in many of
them: about an hour here), which the suite leaves out."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    CASES if os.environ.get(FULL_SWEEP_ENV) == "1" else [],  # empty: one skip, not 1,552
    ids=lambda c: f"{c[0]}-{c[1]}-{c[2][:12]!r}",
)
def test_every_hostile_value_on_every_parameter(env: dict[str, Path], case: tuple) -> None:
    run_case(env, *case)


# ----------------------------------------------------------------------------- the cases found
LONG_NAME = "n" * 5000


def run_cli(*args: object) -> Any:
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def assert_clean(result: Any, code: int) -> None:
    """Exit ``code`` with a message and no traceback (an exception escaping is a crash)."""
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    assert not crashed, f"{type(result.exception).__name__}: {str(result.exception)[:300]}"
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("k", [2**31, 2**63 - 1, 2**64])
@pytest.mark.parametrize("mode", ["text", "hybrid", "exact"])
def test_a_huge_k_is_capped_at_the_page_count(env: dict[str, Path], k: int, mode: str) -> None:
    """k = 2**31 made tantivy ask for 34 GB and abort; 2**63-1 panicked; 2**64 overflowed."""
    from vrag_compress.store.open import open_store

    with open_store(env["index"], readonly=True) as store:
        query = np.ones((2, store.dim), np.float32) if mode != "text" else None
        hits = store.search_many(
            None if query is None else [query],
            k,
            filter=None,
            mode=mode,
            texts=["court"] if mode != "exact" else None,
        )
        assert len(hits[0]) <= store.count()


@pytest.mark.parametrize(
    "args",
    [
        ["delete", LONG_NAME, "x.pdf"],
        ["index", LONG_NAME, "--index", "{tmp}/new"],
        ["index", "{png}", "--index", "{tmp}/" + LONG_NAME],
        ["search", LONG_NAME, "court"],
        ["info", LONG_NAME],
        ["verify", LONG_NAME],
        ["optimize", LONG_NAME],
        ["estimate", LONG_NAME],
        ["show", "{index}", "x.pdf", "1", "--out", "{tmp}/" + LONG_NAME + ".png"],
    ],
    ids=lambda a: a[0],
)
def test_a_name_too_long_for_the_file_system_is_a_usage_error(
    env: dict[str, Path], args: list[str]
) -> None:
    filled = [a.format(index=env["index"], tmp=env["tmp"], png=env["png"]) for a in args]
    result = run_cli(*filled)
    assert_clean(result, 2)
    assert "bytes" in result.output


@pytest.mark.parametrize("name", ["~nosuchuser/x", LONG_NAME, "a\x00b"])
def test_delete_of_a_name_that_is_no_path_says_no_such_document(
    env: dict[str, Path], name: str
) -> None:
    result = run_cli("delete", env["index"], name)
    assert_clean(result, 1)
    assert "no document" in result.output


@pytest.mark.parametrize(
    ("option", "code", "says"),
    [
        (["--seed", "-5"], 2, "--seed"),
        (["--device", "tpu"], 1, "unknown device 'tpu'"),
        (["--model", "st:/nope"], 1, "cannot load 'st:/nope'"),
    ],
)
def test_estimate_options_that_cannot_work_are_one_line(
    env: dict[str, Path], shared_data: Path, option: list[str], code: int, says: str
) -> None:
    pdf = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
    model = [] if "--model" in option else ["--model", "tiny-colqwen2"]
    result = run_cli("estimate", pdf, *model, *option)
    assert_clean(result, code)
    assert says in result.output


@pytest.mark.parametrize("dst", ["file:///any/dir", "s3://bucket/x", "ftp://host/x"])
def test_migrate_to_an_unknown_scheme_is_refused_not_a_local_folder(
    env: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dst: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("migrate", env["index"], dst)
    assert_clean(result, 2)
    assert "is not a store this version can use" in result.output
    assert list(tmp_path.iterdir()) == []  # no ./s3:/bucket/x made


def test_migrate_to_a_relative_local_qdrant_folder_above_the_cwd(
    env: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``qdrant+local://../../../..`` past the root gave sqlite's OperationalError
    (qdrant-client joined the relative path with its own folders)."""
    monkeypatch.chdir(tmp_path)
    climb = "../" * (len(tmp_path.parts) + 2) + str(tmp_path / "q").lstrip("/")
    result = run_cli("migrate", env["index"], f"qdrant+local://{climb}", "--verify-queries", "2")
    assert_clean(result, 0)
    assert (tmp_path / "q" / "collection").is_dir()


def test_migrate_into_a_folder_holding_other_files_is_refused(
    env: dict[str, Path], tmp_path: Path
) -> None:
    busy = tmp_path / "project"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    result = run_cli("migrate", env["index"], f"qdrant+local://{busy}")
    assert_clean(result, 1)
    assert "holds other files (notes.txt)" in result.output
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]


def test_migrate_repoint_to_a_folder_that_is_not_an_index_is_refused(
    env: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "plain").mkdir()
    result = run_cli(
        "migrate", env["index"], f"qdrant+local://{tmp_path / 'q'}", "--repoint", tmp_path / "plain"
    )
    assert_clean(result, 2)
    assert "is not an index folder" in result.output
    assert not (tmp_path / "q").exists() and not (tmp_path / "plain" / "store.json").exists()


def test_migrate_json_report_that_cannot_be_written_is_refused_before_the_copy(
    env: dict[str, Path], tmp_path: Path
) -> None:
    result = run_cli("migrate", env["index"], tmp_path / "copy", "--json", "/proc/nope/x.json")
    assert_clean(result, 2)
    assert "--json" in result.output
    assert not (tmp_path / "copy").exists()


@pytest.mark.parametrize("target", [LONG_NAME, "~nosuchuser/x", "a\x00b"])
def test_export_onnx_of_a_name_that_is_no_path_or_model_is_one_line(target: str) -> None:
    assert_clean(run_cli("export-onnx", "--", target), 1)


def test_show_out_without_an_image_extension_is_a_usage_error(env: dict[str, Path]) -> None:
    result = run_cli("show", env["index"], "scotus-transcript-p1.pdf", "1", "--out", "page")
    assert_clean(result, 2)
    assert ".png" in result.output


def test_search_neighbours_past_any_document_stops_at_its_last_page(env: dict[str, Path]) -> None:
    """--neighbours 2**63-1 built a list of 2**64 page ids (the run never ended)."""
    result = run_cli("search", env["index"], "court", "--neighbours", 2**63 - 1, "--json")
    assert_clean(result, 0)
    hits = json.loads(result.stdout)["hits"]
    assert hits and all(h["context"] == [] for h in hits)  # a one-page document


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["search", "{index}", "court", "--store", "s" * 300], 1, "file systems take at most"),
        (["search", "{index}", "court", "--store", "qdrant://256.1.1.1:1/c"], 1, "not a host"),
        (["search", "{index}", "court", "--store", "qdrant://h:99999/c"], 1, "not a TCP port"),
        (["migrate", "{index}", "/proc/nope/x"], 1, "cannot create the store folder"),
        (["show", "{index}", "x.pdf", "1", "--query", "\udcff\udcfe"], 2, "not UTF-8 text"),
        (["calibrate", "{pairs}", "--model", "tiny-colqwen2", "--ratio", "nan"], 2, "(0, 1]"),
        (["calibrate", "{pairs}", "--model", "tiny-colqwen2", "--out", "/proc/nope/p.json"], 2,
         "cannot make the folder /proc/nope"),
        (["calibrate", "{pairs}", "--model", "tiny-colqwen2", "--plot", "curve.exe"], 2,
         "end the file name with .png"),
    ],
    ids=["store-long", "store-host", "store-port", "migrate-proc", "query-not-utf8",
         "calibrate-ratio", "calibrate-out", "calibrate-plot"],
)  # fmt: skip
def test_values_the_fuzz_found_are_one_line(
    env: dict[str, Path], args: list[str], code: int, says: str
) -> None:
    result = run_cli(*[a.format(index=env["index"], pairs=env["pairs"]) for a in args])
    assert_clean(result, code)
    assert says in result.output


def test_a_path_that_is_not_utf8_is_kept_and_printed_safely(
    env: dict[str, Path], tmp_path: Path
) -> None:
    """A profile written under a Latin-1 name: the file is made, the message escapes the bytes
    (printing the raw name raised UnicodeEncodeError after the work)."""
    out = tmp_path / os.fsdecode(b"caf\xe9.json")
    args = ("calibrate", env["pairs"], "--model", "tiny-colqwen2", "--pairs", 2, "--out", out)
    result = run_cli(*args)
    assert_clean(result, 0)
    # the message may wrap the (long) path: compare it unwrapped
    assert out.is_file() and "caf\\xe9.json" in result.output.replace("\n", "")
