"""Where benchmarks and tests look for the shared data: never beside the installed package."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.cli.app import app
from vrag_compress.shared_data import DATA_ENV, data_dir
from vrag_compress_bench.paths import require_data_dir


def test_explicit_folder_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "env"))
    assert data_dir(tmp_path / "given") == tmp_path / "given"
    assert data_dir() == tmp_path / "env"


def test_without_the_environment_the_search_starts_at_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    checkout = tmp_path / "checkout" / "sub"
    checkout.mkdir(parents=True)
    monkeypatch.chdir(checkout)
    assert data_dir() == (tmp_path / "shared" / "data").resolve()


def test_nothing_found_means_shared_data_beside_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    expected = tmp_path.resolve().parent / "shared" / "data"
    if any((p / "shared" / "data").is_dir() for p in (tmp_path.resolve(), *tmp_path.parents)):
        pytest.skip("a shared/data folder exists above the temporary folder")
    assert data_dir() == expected
    with pytest.raises(typer.BadParameter, match="--data"):
        require_data_dir()


def test_bench_ingest_reads_the_folder_given_by_data(tmp_path):
    result = CliRunner().invoke(
        app, ["bench", "ingest", "--data", str(tmp_path / "missing"), "--long-pages", "0"]
    )
    assert result.exit_code == 2
    text = re.sub(r"[\s│╭╮╰╯─]+", " ", result.output)  # unwrap rich's error panel
    assert "missing does not exist" in text and "VRAG_DATA_DIR" in text


@pytest.mark.parametrize("command", ["estimate", "retention"])
def test_a_missing_dataset_is_a_usage_error(tmp_path, command):
    args = ["bench", command, "--dataset", str(tmp_path / "missing"), "--json", str(tmp_path / "o")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--dataset" in result.output and "no such folder" in result.output


def test_a_folder_that_is_not_beir_is_a_usage_error(tmp_path):
    args = ["bench", "retention", "--dataset", str(tmp_path), "--json", str(tmp_path / "o.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "--dataset" in result.output, result.output


def test_the_benchmarks_get_the_path_checks_of_every_vrag_command():
    """`vrag bench` is loaded from its entry point when it runs; its paths are checked while the
    command line is parsed like those of `vrag`'s own commands (a usage error, no traceback)."""
    result = CliRunner().invoke(app, ["bench", "ingest", "--data", "x" * 5000])
    assert result.exit_code == 2, result.output
    assert "--data" in result.output and "over the limit" in result.output
