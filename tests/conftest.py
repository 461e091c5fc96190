"""Shared fixtures: the real data folder (fail loudly when missing, never skip); and how the
suite splits across pytest-xdist workers (`make test` runs ``-n <cores + 1> --dist loadfile``).

Each test module runs whole on one worker, so its module-scoped fixtures are built once. The
modules of one `TOGETHER` group run on one worker, one after another: they start Ray clusters,
or they time a server that a second such module beside them would slow. `SLOWEST_FIRST` sends
the longest modules out first, so that no worker starts a long module while the other one is
finishing (`make test` prints ``--durations=30``: the numbers to update it from). Each worker's
torch gets its share of the cores (``OMP_NUM_THREADS``), not all of them.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # xdist worker: share the cores, don't oversubscribe
    _workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _workers)))

from vrag_compress.testing import shared_data  # noqa: E402, F401

TOGETHER = {
    "ray": (
        "test_distributed.py",
        "test_distributed_head_kill.py",
        "test_bench_ray.py",
        "test_office_frontends.py",
    ),
    "cranfield": ("test_bench_hybrid.py", "test_eval_runner.py"),
    "estimate": ("test_estimate.py", "test_estimate_queries.py"),
    "timed-server": (
        "test_serve_slowloris.py",
        "test_concurrent_search.py",
        "test_serve_load.py",
        "test_serve_workers.py",
        "test_serve_crash.py",
    ),
}
"""Modules (by file name, in whichever folder under tests/) that must not run beside each other,
or that share a session fixture too costly to build on every worker: the "cranfield" modules
read one MiniLM encoding of a Cranfield slice (tests/bench/conftest.py), made once per worker;
the "estimate" modules one ArxivQA index (`arxivqa_uot_index`)."""

SLOWEST_FIRST = (
    "test_distributed.py",  # the Ray group (about 250 s)
    "test_onnx_query.py",  # (second on the list: tests/test_suite_split.py checks the order)
    "test_concurrent_search.py",  # the timed-server group (about 130 s)
    "test_bench_hybrid.py",
    "test_eval_runner.py",
    "test_office.py",
    "test_estimate_queries.py",
    "test_index.py",
    "test_bench_capture.py",
    "test_bench_store.py",
    "test_wheels.py",
    "test_serve_browser.py",
    "test_demo_retrieval.py",
    "test_cli_startup.py",
    "test_mcp.py",
    "test_missing_extras.py",
)
"""The longest modules, longest first; the others follow in the order pytest collects them."""


def work_unit(nodeid: str) -> str:
    """What one worker runs whole: a test's `TOGETHER` group, else its module."""
    module = nodeid.split("::", 1)[0]
    name = module.rsplit("/", 1)[-1]
    return next((group for group, names in TOGETHER.items() if name in names), module)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: this conftest also loads without xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with the modules of a `TOGETHER` group as one file, handed out in
    collection order (which `pytest_collection_modifyitems` sorts) rather than by test count.

    (xdist's own ``--dist loadgroup`` renames node ids to carry the group, which pytest 9.2's
    node ids no longer allow: pytest-xdist issue 1386.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleGroups(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False
    return ModuleGroups(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the slowest modules first (a stable sort: each module keeps the
    order of its tests, and every worker collects the same order)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)


def printable(text: str) -> str:
    """``text`` with lone surrogates (file names of non-UTF-8 bytes, as `os.fsdecode` gives them)
    written as ``\\udcXX``: xdist sends reports to the controller as UTF-8 and stops the whole
    run on a report it cannot encode."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Captured output, logs and failure text of every report made encodable (see `printable`)."""
    outcome = yield
    report = outcome.get_result()
    report.sections = [(title, printable(text)) for title, text in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        if printable(text) != text:
            report.longrepr = printable(text)


@pytest.fixture
def make_old() -> Callable[[Path], None]:
    """Turns a store folder into one written before text indexes (schema 1: no FTS table, no
    text change log, no triggers), as an index made by an older vrag_compress is."""
    from vrag_compress.store.local import catalog as cat

    def downgrade(path: Path) -> None:
        conn = sqlite3.connect(path / cat.CATALOG_NAME, isolation_level=None)
        for kind in ("fts", "log"):
            for event in ("insert", "delete", "update"):
                conn.execute(f"DROP TRIGGER pages_{kind}_{event}")
        conn.execute("DROP TABLE pages_fts")
        conn.execute("DROP TABLE text_log")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        cat.seal_meta(conn)
        conn.close()

    return downgrade


@pytest.fixture(scope="session")
def law_index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """A tiny-model index of one real page (a court transcript) with metadata team=law, built
    once per session (per xdist worker): the server's hostile-input, fuzz, records and
    slowloris tests and the CLI fuzz tests copy it (never write to it), none builds its own."""
    from vrag_compress import VisualIndex, get_compressor

    path = tmp_path_factory.mktemp("law") / "base.vrag"
    compressor = get_compressor("sap", ratio=0.25, layers=[0, 1])
    with VisualIndex.create(path, model="tiny-colqwen2", compressor=compressor) as index:
        pdf = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
        index.add([pdf], metadata={"team": "law"}, progress=False, ocr="never")
    return path


class Child:
    """A crash test's child process (the part of `subprocess.Popen` those tests use)."""

    def __init__(self, process: Any, out: Path) -> None:
        self.process, self.out = process, out
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        """The exit code; ``-N`` when signal N ended it (``-9``: killed)."""
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.returncode is None:
            raise TimeoutError(f"child {self.pid} still runs after {timeout} s")
        return self.returncode

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def kill(self) -> None:
        self.process.kill()

    @property
    def stdout(self) -> str:
        return (self.out / "stdout").read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return (self.out / "stderr").read_text(errors="replace")


_CHILD_MAIN = """
import os, sys
for _fd, _name in ((1, "stdout"), (2, "stderr")):
    os.dup2(os.open(os.path.join({out!r}, _name), os.O_WRONLY | os.O_CREAT, 0o644), _fd)
sys.argv = {argv!r}
del _fd, _name
"""


@pytest.fixture(scope="session")
def crash_child(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Child]:
    """``crash_child(source, *args)`` starts ``python -c source args...`` as a process forked
    from one that imported numpy and the store once (multiprocessing's forkserver), not as a
    fresh interpreter that imports them again each round. It is still a real process, killed
    (or killing itself) mid-write; ``.wait()`` gives ``-9`` then, and ``.stdout``/``.stderr``
    what it printed."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["numpy", "vrag_compress.store"])

    def start(source: str, *args: str | Path) -> Child:
        out = tmp_path_factory.mktemp("child")
        main = _CHILD_MAIN.format(out=str(out), argv=["-c", *map(str, args)])
        process = context.Process(target=exec, args=(main + source, {"__name__": "__main__"}))
        process.start()
        return Child(process, out)

    return start
