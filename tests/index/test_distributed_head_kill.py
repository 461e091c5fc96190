"""The Ray head node killed under a running `vrag index --ray` driver.

Ray ends such a driver from C++ (``_exit(1)`` once its object store connection breaks), so no
Python code of the driver runs: it used to exit 1 with nothing on stderr and nothing on stdout
under ``--json``. A watchdog process (`vrag_compress.driver_watch`) now says what happened, what
was committed and how to resume. The slow test kills a real head node (its own process group,
its own temp dir and token; this pytest process never joins the cluster) and resumes on a new
head at the same address; the fast ones end a driver with ``os._exit(1)`` as Ray does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.index.test_distributed import (
    LONG,
    LONG_PAGES,
    MODEL,
    RAY,
    BackgroundStart,
    _committed,
    _env,
    _free_port,
)
from tests.index.test_distributed import _whole_and_verified as whole_and_verified
from vrag_compress.index import VisualIndex

COUNTS = re.compile(r"this run committed (\d+) pages? \((\d+) documents? whole\)(?:, plus (\d+))?")


class Heads:
    """Ray head nodes started with `ray start --head`, each a process group of its own (its
    GCS, raylet and object store), all on one port so a restarted head has the same address;
    every group and temp dir is removed by the fixture's finalizer."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.groups: list[int] = []
        self.dirs: list[Path] = []
        self.env: dict[str, str] = {}
        self.address = ""

    def start(self) -> None:
        tmp = Path(tempfile.mkdtemp(prefix="vh", dir="/tmp"))  # short: Ray's socket paths
        self.dirs.append(tmp)
        self.env = _env(tmp)
        command = [RAY, "start", "--head", "--num-cpus", "1", "--disable-usage-stats"]
        command += ["--port", str(self.port), "--node-ip-address", "127.0.0.1"]
        command += ["--include-dashboard=false", "--temp-dir", str(tmp)]
        process = subprocess.Popen(
            command,
            env=self.env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.groups.append(process.pid)
        output, _ = process.communicate(timeout=180)
        if process.returncode != 0:
            raise RuntimeError(f"ray start --head failed:\n{output}")
        from ray._private.services import get_node_ip_address

        self.address = f"{get_node_ip_address()}:{self.port}"

    def start_in_background(self) -> None:
        """`start` in a thread (`join` waits for it and raises what it raised)."""
        self.starting = BackgroundStart(self.start, "the Ray head")

    def join(self) -> None:
        self.starting.join()

    def kill(self) -> None:
        """SIGKILL every Ray process of the heads started so far."""
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def clean(self) -> None:
        self.kill()
        for folder in self.dirs:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def starting_heads(request: pytest.FixtureRequest) -> Iterator[Heads | None]:
    """The first head starts as the module begins, when its slow test is selected: it comes up
    while the fast tests (which need no cluster) run before that test."""
    module = request.node.path
    if importlib.util.find_spec("ray") is None or not any(
        i.path == module and "heads" in i.fixturenames for i in request.session.items
    ):
        yield None
        return
    started = Heads()
    try:
        started.start_in_background()
        yield started
    finally:
        # (a head started after `clean` would be left running)
        started.starting.thread.join(timeout=300)
        started.clean()  # even when starting the head failed half-way


@pytest.fixture
def heads(starting_heads: Heads | None) -> Heads:
    pytest.importorskip("ray", reason="the [ray] extra (in dev) is not installed")
    assert starting_heads is not None
    starting_heads.join()
    return starting_heads


@pytest.fixture
def long_folder(tmp_path: Path, shared_data: Path) -> Path:
    target = tmp_path / "long"
    target.mkdir()
    for name in LONG:
        shutil.copy(shared_data / "pdfs" / name, target / Path(name).name)
    return target


def _driver(heads: Heads, folder: Path, index: Path) -> list[str]:
    command = [sys.executable, "-m", "vrag_compress", "index", str(folder), "--index", str(index)]
    command += ["--model", MODEL, "--device", "cpu", "--json"]
    return [*command, "--ray", heads.address]


def _wait_for_commit(driver: subprocess.Popen[str], index: Path) -> None:
    deadline = time.monotonic() + 300
    while _committed(index) == 0:
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline, "no page was committed"
        time.sleep(0.05)


def _dying_driver(json_report: dict | None, gcs: str, then: str = "os._exit(1)") -> list[str]:
    """A process that starts the driver's watchdog, commits 5 pages of which 1 document is
    whole, starts writing 2 more, then ends as Ray ends a driver (``_exit(1)``)."""
    code = f"""
import os
from vrag_compress.distributed import DriverWatch, RayOptions
from vrag_compress.indexing import AddReport
options = RayOptions(address="10.9.8.7:6379", json_report={json_report!r})
watch = DriverWatch(options, {gcs!r})
report = AddReport(pages_indexed=5, documents_indexed=["a"])
watch.writing(report, 0)
watch.writing(report, 2)
{then}
"""
    return [sys.executable, "-c", code]


def _closed_port() -> str:
    return f"127.0.0.1:{_free_port()}"


def test_a_driver_ended_by_ray_gets_its_error_and_json_from_the_watchdog() -> None:
    dying = _dying_driver({"index": "docs.vrag"}, _closed_port())
    result = subprocess.run(dying, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("error: RayClusterLostError: the Ray cluster at 10.9.8.7:6379 went away")
    assert "this run committed 5 pages (1 document whole), plus 2 pages being written" in line
    assert json.loads(result.stdout) == {"index": "docs.vrag", "error": line[len("error: ") :]}


def test_without_json_stdout_stays_empty() -> None:
    result = subprocess.run(
        _dying_driver(None, _closed_port()), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: RayClusterLostError: ")


def test_a_cluster_that_still_answers_is_not_called_lost() -> None:
    """The driver killed from outside (or its local node died) while the head answers."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        gcs = f"127.0.0.1:{listening.getsockname()[1]}"
        result = subprocess.run(
            _dying_driver(None, gcs), capture_output=True, text=True, timeout=120
        )
    assert result.stderr.startswith(
        "error: RayDriverLostError: this driver ended without reporting an error while the "
        "Ray cluster at 10.9.8.7:6379 still answers"
    )


def test_a_head_that_stops_answering_just_after_the_driver_ended_is_lost() -> None:
    """A killed head's GCS can accept connections for a moment after its driver died (seen
    under load): the watchdog waits for it to settle before calling the cluster alive."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    gcs = f"127.0.0.1:{listening.getsockname()[1]}"

    def answer_once_then_go_away() -> None:
        first, _ = listening.accept()  # the watchdog's first check gets an answer
        first.close()
        time.sleep(0.5)
        listening.close()

    head = threading.Thread(target=answer_once_then_go_away, daemon=True)
    head.start()
    result = subprocess.run(_dying_driver(None, gcs), capture_output=True, text=True, timeout=120)
    head.join(timeout=10)
    assert result.stderr.startswith("error: RayClusterLostError: "), result.stderr


def test_a_driver_that_reports_itself_leaves_the_watchdog_silent() -> None:
    """A run that returns or raises says "done": its own report is the only one."""
    then = "watch.close()\nraise SystemExit(3)"
    result = subprocess.run(
        _dying_driver({"index": "x"}, _closed_port(), then), capture_output=True, text=True
    )
    assert result.returncode == 3 and result.stdout == "" and result.stderr == ""


@pytest.mark.slow  # two head nodes and two drivers with the tiny model, end to end
@pytest.mark.e2e
def test_a_killed_head_node_is_reported_and_the_same_command_resumes(
    heads: Heads, long_folder: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    # made here (batches of 2), so the drivers load no model (their actor encodes); this
    # process loads it once, for the search below
    VisualIndex.create(index, model=MODEL, batch_size=2, device="cpu").close()
    command = _driver(heads, long_folder, index)
    driver = subprocess.Popen(
        command, env=heads.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for_commit(driver, index)
        heads.kill()
        stdout, stderr = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 1, stderr
    [line] = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(
        f"error: RayClusterLostError: the Ray cluster at {heads.address} went away"
    ), stderr
    assert "run the same command again to resume" in line and "Traceback" not in stderr
    assert json.loads(stdout) == {"index": str(index), "error": line.removeprefix("error: ")}
    committed = _committed(index)
    assert 0 < committed < LONG_PAGES
    counts = COUNTS.search(line)
    assert counts is not None, line
    said, writing = int(counts[1]), int(counts[3] or 0)
    assert committed in (said, said + writing)  # a batch being written: whole or not at all
    failed: list[BaseException] = []

    def restart() -> None:
        try:
            heads.start()  # a new head at the same address: the same command resumes
        except BaseException as error:  # raised again below, in the test's thread
            failed.append(error)

    restarting = threading.Thread(target=restart, daemon=True)
    restarting.start()  # while what the killed run kept is checked
    try:
        with VisualIndex.open(index, readonly=True, device="cpu") as kept:
            assert kept.verify().ok and kept.store.count() == committed
            assert len(kept.search("table", k=3)) == min(3, committed)
    finally:
        restarting.join()  # (the fixture's finalizer must see every head started)
    if failed:
        raise failed[0]
    again = subprocess.run(command, env=heads.env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["pages_indexed"] == LONG_PAGES - committed and report["failures"] == []
    assert whole_and_verified(index) == LONG_PAGES
