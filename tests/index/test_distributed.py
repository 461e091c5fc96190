"""Indexing on a real local Ray cluster (`vrag index --ray`), started by these tests.

A head node and a second node (`ray start`, one CPU each, on this machine) run the encoder
actors with the tiny ColQwen2; the driver commits. The store must verify and answer exactly like
one built in a single process, a bad PDF is reported with its reason, and a worker node killed
mid-run loses and duplicates nothing. Each node is its own process group, killed by its id in
teardown (`ray stop --force` would stop every Ray process on the machine, other runs' too).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import vrag_compress
from tests.ingest.test_ingest_hostile import bomb_page, good_page, write_raw_pdf
from vrag_compress.cli import app
from vrag_compress.distributed import RayOptions
from vrag_compress.index import VisualIndex
from vrag_compress.store.local.catalog import CATALOG_NAME

# find_spec, not importorskip: the tests that use Ray in this process import it, so collecting
# this module (in every pytest-xdist worker) costs no Ray import
if importlib.util.find_spec("ray") is None:
    pytest.skip("the [ray] extra (in dev) is not installed", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # a real two-node cluster, real models

ROOT = Path(vrag_compress.__file__).resolve().parent.parent
RAY = str(Path(sys.executable).with_name("ray"))
MODEL = "tiny-colqwen2"
GOOD = ["edge/multi_page.pdf", "icdar2013/eu-005.pdf", "icdar2013/eu-006.pdf"]
BAD = "edge/unreadablemetadata.pdf"  # the driver cannot open it
LONG = ["icdar2013/eu-006.pdf", "icdar2013/us-017.pdf"]
LONG_PAGES = 10  # 5 batches of 2: a run killed at its first commit is mid-run
LONGER = ["icdar2013/eu-004.pdf", "icdar2013/us-017.pdf"]  # 22 pages: never indexed whole
STALL_S = 8  # --ray-timeout of the hung-worker test: more than one batch takes on a busy machine
QUERIES = ["total revenue by region", "background checks", "table of contents"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


RAY_AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
"""The cluster listens on this machine's network address: only holders of this run's token get
in (and a token file a local Ray left in ~/.ray is never used)."""


def _env(tmp: Path) -> dict[str, str]:
    """This checkout importable on the workers, the tiny models cached in one place, and node
    failures noticed within seconds (Ray's defaults wait much longer)."""
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        **RAY_AUTH,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "HF_HUB_OFFLINE": "1",
        "RAY_health_check_period_ms": "500",
        "RAY_health_check_timeout_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
        "RAY_USAGE_STATS_ENABLED": "0",
        "TMPDIR": str(tmp),
    }


class BackgroundStart:
    """A slow start (Ray nodes) run in a thread while other tests run; `join` waits for it and
    raises in the test's thread what it raised."""

    def __init__(self, start: Callable[[], None], what: str) -> None:
        self.what = what
        self.failed: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(start,), daemon=True)
        self.thread.start()

    def _run(self, start: Callable[[], None]) -> None:
        try:
            start()
        except BaseException as error:  # raised again by `join`, in the test's thread
            self.failed = error

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
        if self.failed is not None:
            raise RuntimeError(f"{self.what} did not start") from self.failed


class Cluster:
    """A head node and a second node, each a process group this test owns; the test process
    itself is joined to it as a driver."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="vr", dir="/tmp"))  # short: Ray's socket paths
        self.port = _free_port()
        self.env = _env(self.tmp)
        self.groups: dict[str, int] = {}
        self.address = ""

    def start_node(self, name: str, *args: str) -> None:
        process = subprocess.Popen(
            [RAY, "start", "--num-cpus", "1", "--disable-usage-stats", *args],
            env=self.env,
            start_new_session=True,  # its own process group, which the daemons it forks keep
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.groups[name] = process.pid
        output, _ = process.communicate(timeout=120)
        if process.returncode != 0:
            raise RuntimeError(f"ray start ({name}) failed:\n{output}")

    def start_nodes(self) -> None:
        """The two `ray start` runs (`start_in_background` runs them beside other work)."""
        self.start_node(
            "head",
            "--head",
            "--port",
            str(self.port),
            "--node-ip-address",
            "127.0.0.1",  # Ray swaps loopback for this machine's own address: still local
            "--include-dashboard=false",
            "--temp-dir",
            str(self.tmp),
        )
        from ray._private.services import get_node_ip_address

        self.address = f"{get_node_ip_address()}:{self.port}"
        self.start_node("worker", "--address", self.address)

    def start_in_background(self) -> None:
        self.starting = BackgroundStart(self.start_nodes, "the Ray cluster")

    def join(self) -> None:
        """Wait for the nodes, then join the cluster as a driver."""
        import ray

        self.starting.join()
        ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
        self.wait_for_nodes(2)

    def wait_for_nodes(self, count: int) -> None:
        import ray

        deadline = time.monotonic() + 60
        while sum(node["Alive"] for node in ray.nodes()) != count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray cluster never had {count} live nodes")
            time.sleep(0.5)

    def kill(self, name: str) -> None:
        """SIGKILL a whole node: its raylet, object store and the actor processes on it."""
        group = self.groups.pop(name, None)
        if group is not None:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        self.starting.join(timeout=300)  # a node started after this would be left running
        import ray

        ray.shutdown()
        for name in ("worker", "head"):
            self.kill(name)
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def starting_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster | None]:
    """The nodes start as the module begins, when one of its selected tests uses the cluster:
    they come up while the first tests run and the reference store is built (`cluster`)."""
    module = request.node.path
    if not any(i.path == module and "cluster" in i.fixturenames for i in request.session.items):
        yield None
        return
    saved = {key: os.environ.get(key) for key in RAY_AUTH}
    os.environ.update(RAY_AUTH)  # this process joins the cluster as a driver too
    _reload_ray_config()
    running = Cluster()
    try:
        running.start_in_background()
        yield running
    finally:
        running.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _reload_ray_config()


@pytest.fixture(scope="module")
def cluster(starting_cluster: Cluster | None, local_store: tuple[Path, dict]) -> Iterator[Cluster]:
    """The running cluster, this process joined to it (after the reference store is built,
    while the nodes start)."""
    assert starting_cluster is not None
    starting_cluster.join()
    yield starting_cluster


def _reload_ray_config() -> None:
    """Ray reads RAY_AUTH_* when it is imported; this process imported it before the fixture."""
    from ray._raylet import Config

    Config.initialize("")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """Shared PDFs (10 pages), one the driver cannot open, and one whose page 2 a worker
    refuses to render (a decompression bomb): 12 pages indexed."""
    target = tmp_path_factory.mktemp("pdfs")
    for name in [*GOOD, BAD]:
        shutil.copy(shared_data / "pdfs" / name, target / Path(name).name)
    write_raw_pdf(target / "bomb.pdf", [good_page(), bomb_page(300 << 20), good_page()])
    return target


def _create(path: Path) -> VisualIndex:
    return VisualIndex.create(path, model=MODEL, batch_size=2, device="cpu")


@pytest.fixture(scope="module")
def local_store(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> tuple[Path, dict]:
    """The same folder indexed in one process (no Ray): the reference."""
    path = tmp_path_factory.mktemp("local") / "index"
    with _create(path) as index:
        return path, index.add(folder, progress=False).to_dict()


def _top5(path: Path) -> list[list[tuple[str, float]]]:
    with VisualIndex.open(path, readonly=True, device="cpu") as index:
        return [
            [(hit.page_id, round(hit.score, 4)) for hit in index.search(query, k=5)]
            for query in QUERIES
        ]


def _pages(path: Path) -> dict[str, tuple[dict, np.ndarray]]:
    with VisualIndex.open(path, readonly=True) as index:
        records = index.store.get(index.store.page_ids())
        return {r.page_id: (r.metadata, r.vectors) for r in records}


def _documents(path: Path) -> dict[str, tuple[bool, dict]]:
    with VisualIndex.open(path, readonly=True) as index:
        return {d.doc_id: (d.complete, d.metadata) for d in index.documents()}


def _whole_and_verified(path: Path) -> int:
    """Every document complete, each page stored once, no gaps; the store verifies."""
    with VisualIndex.open(path, readonly=True) as index:
        assert index.verify().ok
        stored = [(r.doc_id, r.page_no) for r in index.store.get(index.store.page_ids())]
        assert len(stored) == len(set(stored))
        for doc in index.documents():
            assert doc.complete
            pages = sorted(no for doc_id, no in stored if doc_id == doc.doc_id)
            assert pages == list(range(1, (doc.n_pages or 0) + 1))
        return len(stored)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in folder.rglob("*") if f.is_file()}


def _failures(report: dict, name: str) -> list[dict]:
    return [f for f in report["failures"] if f["path"].endswith(name)]


def test_an_unreachable_cluster_is_one_line_at_once(tmp_path: Path) -> None:
    """Ray itself would retry for minutes; the address is checked first. (Runs before the
    cluster starts: this process then has no Ray connection to reuse.)"""
    from typer.testing import CliRunner

    pdf = write_raw_pdf(tmp_path / "one.pdf", [good_page()])
    address = f"127.0.0.1:{_free_port()}"  # nothing listens there
    command = ["index", str(pdf), "--index", str(tmp_path / "i"), "--model", MODEL]
    result = CliRunner().invoke(app, [*command, "--ray", address])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1  # (the model's load messages come before it)
    assert errors[0].startswith(
        f"error: RayUnavailableError: cannot reach the Ray cluster at {address}"
    )
    assert "Traceback" not in result.stderr and "gcs_client" not in result.stderr


def test_a_ray_built_store_is_the_single_process_store(
    cluster: Cluster, folder: Path, local_store: tuple[Path, dict], tmp_path: Path
) -> None:
    local_path, local_report = local_store
    with _create(tmp_path / "index") as index:
        report = index.add(folder, progress=False, ray=RayOptions(address=cluster.address))
        assert index.store.count() == 12
    report_dict = report.to_dict()
    assert report.pages_indexed == local_report["pages_indexed"] == 12
    assert sorted(report.documents_indexed) == sorted(local_report["documents_indexed"])
    assert _failures(report_dict, Path(BAD).name) == _failures(local_report, Path(BAD).name) != []
    [bomb] = _failures(report_dict, "bomb.pdf")  # rendered, and refused, on a worker
    assert bomb["page_no"] == "2" and "decompresses to more than" in bomb["reason"]
    assert _failures(local_report, "bomb.pdf") == [bomb]
    ray_pages, local_pages = _pages(tmp_path / "index"), _pages(local_path)
    assert sorted(ray_pages) == sorted(local_pages)
    for page_id, (metadata, vectors) in local_pages.items():
        assert ray_pages[page_id][0] == metadata
        np.testing.assert_allclose(ray_pages[page_id][1], vectors, atol=2e-3)
    assert _documents(tmp_path / "index") == _documents(local_path)  # failed_pages too
    # the actors made the stored images: the same files, byte for byte; the same layouts
    ray_images = _files(tmp_path / "index" / "images")
    assert ray_images == _files(local_path / "images") and len(ray_images) == 12
    assert _files(tmp_path / "index" / "layouts").keys() == _files(local_path / "layouts").keys()
    with VisualIndex.open(tmp_path / "index", readonly=True) as index:
        assert index.verify().ok
    assert _top5(tmp_path / "index") == _top5(local_path)
    with VisualIndex.open(tmp_path / "index") as index:  # a re-run skips everything
        again = index.add(folder, progress=False, ray=RayOptions(address=cluster.address))
    assert again.pages_indexed == 0 and again.pages_skipped == 13  # the 3 pages of bomb.pdf


def test_a_ray_run_writes_straight_to_a_qdrant_store(
    cluster: Cluster, folder: Path, local_store: tuple[Path, dict], tmp_path: Path
) -> None:
    """`--ray --store qdrant://...`: the driver commits to Qdrant (local mode here: no server).
    One actor: what is checked is the driver's side (the test above spreads over both nodes)."""
    pytest.importorskip("qdrant_client")
    store = f"qdrant+local://{tmp_path / 'q'}?collection=docs"
    with VisualIndex.create(
        tmp_path / "index", model=MODEL, batch_size=2, device="cpu", store=store
    ) as index:
        ray = RayOptions(address=cluster.address, actors=1)
        report = index.add(folder, progress=False, ray=ray)
        assert report.pages_indexed == index.store.count() == 12
    assert sorted(_pages(tmp_path / "index")) == sorted(_pages(local_store[0]))
    assert _top5(tmp_path / "index") == _top5(local_store[0])


def test_missing_ray_is_one_line_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    pdf = write_raw_pdf(tmp_path / "one.pdf", [good_page()])
    result = CliRunner().invoke(
        app, ["index", str(pdf), "--index", str(tmp_path / "i"), "--ray", "auto"]
    )
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: --ray needs Ray: pip install 'vrag-compress[ray]'"
    assert not (tmp_path / "i").exists()


def _copies(target: Path, names: list[str], shared_data: Path) -> Path:
    for name in names:
        shutil.copy(shared_data / "pdfs" / name, target / Path(name).name)
    return target


@pytest.fixture(scope="module")
def long_folder(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    return _copies(tmp_path_factory.mktemp("long"), LONG, shared_data)


@pytest.fixture(scope="module")
def longer_folder(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """More batches than the actors can finish while the test stops them (in a run that
    never indexes the rest, pages cost nothing)."""
    return _copies(tmp_path_factory.mktemp("longer"), LONGER, shared_data)


def _cli_index(cluster: Cluster, folder: Path, index: Path, *options: str) -> subprocess.Popen[str]:
    """`vrag index --ray` in its own process: the driver, adding to an empty index made here
    first (batches of 2). A driver that creates the index loads the model to learn its vector
    dimension, seconds of CPU that no test here is about; one that opens an index loads none
    (its actors encode). The head-kill test's first driver still creates its index."""
    _create(index).close()  # (this process has the model loaded already: no load)
    command = [sys.executable, "-m", "vrag_compress", "index", str(folder), "--index", str(index)]
    command += ["--model", MODEL, "--device", "cpu", "--json"]
    command += ["--ray", cluster.address, *options]
    return subprocess.Popen(
        command, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _committed(index: Path) -> int:
    """Pages committed so far, read from the catalog while the driver writes."""
    if not (index / CATALOG_NAME).is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{index / CATALOG_NAME}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT count(*) FROM pages").fetchone()[0])
    except sqlite3.Error:
        return 0


def _wait_for_commit(process: subprocess.Popen[str], index: Path) -> None:
    deadline = time.monotonic() + 240
    while _committed(index) == 0:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no page was committed"
        time.sleep(0.05)


def test_a_killed_driver_resumes_like_a_single_process_run(
    cluster: Cluster, long_folder: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    driver = _cli_index(cluster, long_folder, index)
    _wait_for_commit(driver, index)
    driver.kill()  # SIGKILL: no cleanup of any kind
    driver.communicate()
    committed = _committed(index)
    assert 0 < committed < LONG_PAGES
    with VisualIndex.open(index) as resumed:  # one actor is enough for the pages left
        ray = RayOptions(address=cluster.address, actors=1)
        report = resumed.add(long_folder, progress=False, ray=ray)
    assert report.pages_indexed == LONG_PAGES - committed and report.failures == []
    assert _whole_and_verified(index) == LONG_PAGES


def _actor_pids(cluster: Cluster) -> list[int]:
    """The processes of the encoder actors on this test's nodes: Ray titles them
    ``ray::PageWorker...``, and they run in the session of the node that started them."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes()
            session = os.getsid(int(entry.name))
        except OSError:
            continue
        if title.startswith(b"ray::PageWorker") and session in cluster.groups.values():
            pids.append(int(entry.name))
    return pids


def test_a_hung_worker_stops_the_run_with_an_error_not_a_hang(
    cluster: Cluster, longer_folder: Path, tmp_path: Path
) -> None:
    """Every actor SIGSTOPped after the first commit: the driver used to wait for ever; with
    --ray-timeout it stops, says why on stderr and in the --json output, and what was committed
    stays (the same command resumes once the cluster is healthy)."""
    index = tmp_path / "index"
    driver = _cli_index(cluster, longer_folder, index, "--ray-timeout", str(STALL_S))
    _wait_for_commit(driver, index)
    stopped = _actor_pids(cluster)
    assert stopped
    try:
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        stdout, stderr = driver.communicate(timeout=240)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert driver.returncode == 1, stderr
    assert "RayStalledError" in stderr and "--ray-timeout" in stderr, stderr
    assert "Traceback" not in stderr
    assert "RayStalledError" in json.loads(stdout)["error"]
    assert 0 < _committed(index) < 22


def test_a_stalled_actor_gives_up_after_the_stall_timeout(cluster: Cluster) -> None:
    """`ActorPool.result` on an actor that never answers: `RayStalledError` after the timeout."""
    import ray

    from vrag_compress.distributed import ActorPool, RayStalledError, WorkUnit

    @ray.remote(num_cpus=0)
    class Sleeper:
        def process(self, request: list) -> None:
            time.sleep(3600)

    actor = Sleeper.remote()
    pool = ActorPool(ray, [actor], stall_timeout_s=2)
    unit = WorkUnit()
    try:
        with pytest.raises(RayStalledError, match="waited 2 s for a result"):
            pool.result(unit, actor, actor.process.remote([]))
    finally:
        ray.kill(actor)


def test_a_worker_node_killed_mid_run_loses_and_duplicates_nothing(
    cluster: Cluster, long_folder: Path, tmp_path: Path
) -> None:
    """Runs last: the cluster keeps only its head node afterwards."""
    index = tmp_path / "index"
    driver = _cli_index(cluster, long_folder, index)
    _wait_for_commit(driver, index)
    cluster.kill("worker")
    at_kill = _committed(index)
    stdout, stderr = driver.communicate(timeout=300)
    assert driver.returncode == 0, stderr
    assert (
        at_kill < LONG_PAGES and "runs again" in stderr
    )  # killed mid-run; its batches were redone
    report = json.loads(stdout)
    assert report["pages_indexed"] == LONG_PAGES and report["failures"] == []
    assert _whole_and_verified(index) == LONG_PAGES
