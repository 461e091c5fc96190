"""Every `vrag bench ...` command has a smoke test that runs it on tiny inputs.

The benchmarks are run by hand and rarely by CI otherwise, so one that breaks goes unnoticed
(`vrag bench capture` once failed with a KeyError before its first mode ran). The smoke tests
live in the test files of the code they measure; this test finds them by the argument list they
invoke (`["bench", "<command>", ...]`) and fails for a command no test runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import typer.main

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.cli.app import app
from vrag_compress.cli.plugins import load_group

ROOT = Path(__file__).resolve().parents[2]
TEST_FOLDERS = [ROOT / "tests", *sorted((ROOT / "integrations").glob("**/tests"))]


def bench_commands() -> set[str]:
    """The subcommands of `vrag bench`, as the CLI lists them (the group the
    vrag-compress-bench distribution registers through its entry point)."""
    group = typer.main.get_command(app)
    assert "bench" in group.list_commands(typer.Context(group))  # type: ignore[attr-defined]
    return set(load_group("bench").commands)


def invoked_bench_commands() -> dict[str, list[str]]:
    """Command -> the test files that call `vrag bench <command>` (an argument list that starts
    with "bench" and the command, passed to CliRunner.invoke or a subprocess)."""
    found: dict[str, list[str]] = {}
    for folder in TEST_FOLDERS:
        for path in sorted(folder.rglob("test_*.py")):
            if path.resolve() == Path(__file__).resolve():
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.List) or len(node.elts) < 2:
                    continue
                first, second = node.elts[:2]
                if (
                    isinstance(first, ast.Constant)
                    and first.value == "bench"
                    and isinstance(second, ast.Constant)
                    and isinstance(second.value, str)
                    and not second.value.startswith("-")  # `bench --help` names no command
                ):
                    found.setdefault(second.value, []).append(path.name)
    return found


def test_the_cli_lists_the_benchmarks() -> None:
    assert {"capture", "compress", "retention", "store"} <= bench_commands()


def test_every_bench_command_has_a_smoke_test() -> None:
    invoked = invoked_bench_commands()
    missing = sorted(bench_commands() - set(invoked))
    assert missing == [], f"`vrag bench` commands that no test runs: {missing}"


def test_the_smoke_tests_name_real_bench_commands() -> None:
    unknown = {
        c: files for c, files in invoked_bench_commands().items() if c not in bench_commands()
    }
    assert unknown == {}
