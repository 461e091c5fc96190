"""How the suite splits across pytest-xdist workers (tests/conftest.py), run on a small
stand-in suite: modules named together share a worker, the slowest goes out first, and the
rest is spread over both workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RECORD = """
import json, os, time
from pathlib import Path

def test_{n}(request):
    out = Path(os.environ["SPLIT_LOG"]) / (request.node.path.stem + "-{n}.json")
    out.write_text(json.dumps([os.environ["PYTEST_XDIST_WORKER"], time.monotonic()]))
    time.sleep(0.2)
"""


ODD_NAME = """
import logging, os

def test_logs_a_file_name_of_non_utf8_bytes():
    logging.getLogger("stand-in").warning("opened %s", os.fsdecode(b"ind\\xe9x"))
    print(os.fsdecode(b"ind\\xe9x"))
"""


def _module(tests: int) -> str:
    return "\n".join(RECORD.format(n=n) for n in range(tests))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, float]]]:
    """A copy of this suite's conftest over stand-in modules, run with ``-n 2 --dist loadfile``
    (as `make test` runs it): the worker and start time of every test, by module."""
    root = tmp_path_factory.mktemp("split")
    tests, log = root / "tests", root / "log"
    tests.mkdir()
    log.mkdir()
    (tests / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
    # the two Ray modules have the most tests: plain loadfile hands them out first, one to each
    # worker; test_onnx_query.py, second on the slowest-first list, would go out last
    modules = {"test_bench_ray.py": 4, "test_distributed.py": 3, "test_onnx_query.py": 1}
    modules |= {f"test_m{i}.py": 2 for i in range(6)}
    for name, count in modules.items():
        (tests / name).write_text(_module(count))
    # a captured log and output that UTF-8 cannot encode: xdist once stopped the whole run on it
    (tests / "test_odd_name.py").write_text(ODD_NAME + _module(1))
    modules["test_odd_name.py"] = 2
    # only xdist among the installed plugins: the copied conftest needs no other, and each of
    # the three processes would otherwise import them all (hypothesis, syrupy, benchmark, ...)
    env = {**os.environ, "SPLIT_LOG": str(log), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist"]
    command += ["-n", "2"]
    command += ["--dist", "loadfile", "-c", os.devnull, "--rootdir", str(root), str(tests)]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    by_module: dict[str, list[tuple[str, float]]] = {}
    for record in sorted(log.iterdir()):
        worker, started = json.loads(record.read_text())
        by_module.setdefault(record.stem.rsplit("-", 1)[0] + ".py", []).append((worker, started))
    assert set(by_module) == set(modules)  # every module ran: no worker stopped
    return by_module


def test_modules_named_together_share_one_worker(runs: dict) -> None:
    workers = {w for name in ("test_distributed.py", "test_bench_ray.py") for w, _ in runs[name]}
    assert len(workers) == 1


def test_each_module_stays_on_one_worker_and_both_workers_get_work(runs: dict) -> None:
    assert all(len({w for w, _ in tests}) == 1 for tests in runs.values())
    assert {w for tests in runs.values() for w, _ in tests} == {"gw0", "gw1"}


@pytest.mark.parametrize("module", ["test_distributed.py", "test_onnx_query.py"])
def test_the_slowest_modules_are_sent_out_first(runs: dict, module: str) -> None:
    """The first two modules of the conftest's slowest-first list start their workers."""
    [worker] = {w for w, _ in runs[module]}
    same_worker = [t for tests in runs.values() for w, t in tests if w == worker]
    assert min(t for _, t in runs[module]) == min(same_worker)
