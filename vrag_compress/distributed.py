"""Indexing on a Ray cluster: `VisualIndex.add(..., ray=ADDRESS)` and `vrag index --ray`.

Why this shape: rendering, OCR, encoding (with attention capture) and compression are the costly,
stateless part of indexing, so they run on Ray actors that each load the index's encoder once
(one GPU per actor where the cluster has GPUs, one CPU otherwise). Planning (which documents are
new, where interrupted ones resume) and every commit stay in the driver and go through the same
`Indexer.write` as a single-process run, in the order the work was planned: a Ray-built store has
the same page ids, metadata and vectors, and a killed driver resumes exactly as one process does.

Backpressure: at most `in_flight` batches (default two per actor) are out at any time, each only
page numbers on the way out, so memory stays flat however many files there are.
Faults: a batch whose actor died (its node was killed) is sent again to a surviving actor; its
result is committed once, whole, or never. With no actor left the run stops like Ctrl-C: what was
committed stays, and the next run resumes. A lost head node is the one fault Ray does not
raise: it ends the driver from C++ (`_exit(1)`), so a watchdog process (`driver_watch`), told of
every commit, prints the error the driver cannot.

Ray is imported only here, and only when asked for (the ``[ray]`` extra).
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from vrag_compress.driver_watch import describe, reachable
from vrag_compress.index_config import VisualIndexError
from vrag_compress.indexing import AddReport, DocState, Indexer, ProcessedBatch
from vrag_compress.ingest import IngestError, Page
from vrag_compress.ingest.ocr import PageOcr
from vrag_compress.ingest.page_assets import PageAssets
from vrag_compress.progress import IndexProgress

log = logging.getLogger(__name__)

RAY_MISSING = "--ray needs Ray: pip install 'vrag-compress[ray]'"


class RayUnavailableError(VisualIndexError):
    """Ray is not installed, or the cluster cannot be reached."""


class RayWorkersLostError(VisualIndexError):
    """Every encoder actor died; the committed pages stay and a re-run resumes."""


class RayClusterLostError(VisualIndexError):
    """The cluster's head node went away mid-run; the committed pages stay and the same
    command resumes once it is back."""


class RayStalledError(VisualIndexError):
    """No result came from the encoder actors for `RayOptions.stall_timeout_s`: a hung worker,
    a stopped node or a lost head. The committed pages stay and a re-run resumes."""


DEFAULT_STALL_TIMEOUT_S = 600.0
"""How long the driver waits for the next result before it stops with `RayStalledError`;
generous, since one batch of a large model on a CPU takes minutes."""
DEFAULT_START_TIMEOUT_S = 1800.0
"""How long the actors may take to start (scheduled, model downloaded and loaded)."""


@dataclass
class WorkUnit:
    """One batch of page numbers to process remotely, and the documents whose last pages it
    carries (finished once it is committed)."""

    items: list[tuple[DocState, int]] = field(default_factory=list)
    finishing: list[DocState] = field(default_factory=list)

    def request(self) -> list[tuple[Any, int]]:
        """What travels to the worker: each page's document opener (one object per document,
        which the worker opens once) and page number."""
        openers = {id(state): _absolute(state.opener) for state, _ in self.items}
        return [(openers[id(state)], page_no) for state, page_no in self.items]


def _absolute(opener: Any) -> Any:
    """An opener naming its file by absolute path: a worker's working folder is not the
    driver's (the files must be at the same path on every node)."""
    if isinstance(opener, partial) and opener.args:
        path = Path(opener.args[0]).resolve()
        return partial(opener.func, path, *opener.args[1:], **opener.keywords)
    return opener


@dataclass(frozen=True)
class PageHeader:
    """A rendered page without its pixels: what the driver's writer reads of it. The pixels
    stay on the worker, which sends the stored image file ready-made (`ProcessedBatch`): a
    150 dpi page is 6.5 MB of RGB, its stored webp ~60 KB, and encoding it is serial work the
    one writer should not do."""

    doc_id: str
    page_no: int
    text: str | None
    source: Path

    @classmethod
    def of(cls, page: Page) -> PageHeader:
        return cls(page.doc_id, page.page_no, page.text, page.source)


@dataclass
class RemoteResult:
    """A worker's answer for one unit: the rendered pages' headers (None where rendering
    failed), what `Indexer.process` made of them, and the failures and OCR notes it reported."""

    pages: list[PageHeader | None]
    processed: ProcessedBatch
    report: AddReport


def import_ray() -> Any:
    """The `ray` module, or a one-line error naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise RayUnavailableError(RAY_MISSING) from None
    return ray


def connect(address: str | None) -> Any:
    """Join the cluster at ``address`` ("auto", "host:port", "ray://host:10001"), or start a
    local one for ``None``/"local"; returns the `ray` module. A process already connected to
    Ray (`ray.init` called before) keeps the cluster it is on, whatever ``address`` says."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    target = None if address in (None, "", "local") else address
    if target is not None:
        check_reachable(target)
    try:
        ray.init(address=target, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise RayUnavailableError(f"cannot reach the Ray cluster at {address}: {error}") from None
    _quiet_cluster_messages()
    return ray


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail at once, in one line, when a ``host:port`` address does not answer: `ray.init`
    would retry for minutes, printing Ray's own warnings. Other forms ("auto", ray://) are left
    to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RayUnavailableError(
            f"cannot reach the Ray cluster at {address} ({reason}); start it with "
            "`ray start --head` there, or give its address"
        ) from None


def _quiet_cluster_messages() -> None:
    """Ray prints cluster events (a node marked dead) on the driver's stdout, which would break
    `vrag index --json`; our own warnings (on stderr) say what happened to the run instead.
    The switch is a Ray module flag: where a Ray version lacks it, the messages stay."""
    try:
        from ray._private import worker as ray_worker
    except ImportError:
        return
    if hasattr(ray_worker, "_worker_logs_enabled"):
        ray_worker._worker_logs_enabled = False


# ----------------------------------------------------------------- the worker side
class PageWorker:
    """Runs on a Ray worker: renders, OCRs, encodes and compresses batches of pages with the
    index's encoder and compressor (loaded once, from the index's recorded config)."""

    def __init__(self, config: dict[str, Any], device: str, ocr_mode: str) -> None:
        from vrag_compress.index_config import IndexConfig, recorded_compressor, reopen_options

        recorded = IndexConfig.from_dict(config)
        self.config = recorded
        self.device = device
        self.page_ocr = PageOcr(ocr_mode)
        # only to prepare the stored images (`PageAssets.prepare`): nothing is written here
        self.assets = PageAssets(
            Path(), **recorded.images.to_dict(), dpi=recorded.dpi, renderer=recorded.renderer
        )
        self._loaded: tuple[Any, Any] | None = None
        self._options = reopen_options(recorded.encoder_options, device)
        self._compressor = lambda: recorded_compressor(recorded)

    def _models(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from vrag_compress.encoders import load_encoder

            encoder = load_encoder(
                self.config.model_id,
                device=self.device,
                batch_size=self.config.batch_size,
                **self._options,
            )
            self._loaded = (encoder, self._compressor())
        return self._loaded

    def ready(self) -> str:
        """Load the models now (so a broken model fails before any page is sent)."""
        self._models()
        return self.device

    def process(self, request: list[tuple[Any, int]]) -> RemoteResult:
        """Render the requested pages and run `Indexer.process` on those that rendered; the
        positions in the answer are the request's."""
        report = AddReport(ocr_mode=self.page_ocr.mode)
        pages = render(request, report)
        rendered = [(i, page) for i, page in enumerate(pages) if page is not None]
        compute = Indexer(
            None,  # type: ignore[arg-type]  # the compute half touches no store or files
            self.assets,
            lambda: self._models()[0],
            lambda: self._models()[1],
            lambda doc_id: 0,
            model_id=self.config.model_id,
            batch_size=self.config.batch_size,
            dpi=self.config.dpi,
            renderer=self.config.renderer,
        )
        done = compute.process([page for _, page in rendered], report, self.page_ocr)
        at = [i for i, _ in rendered]  # position among the rendered -> position in the request
        failed = [at[i] for i in done.refused] + [i for i, p in enumerate(pages) if p is None]
        processed = ProcessedBatch(
            done=[(at[i], slim(e), c, t, image) for i, e, c, t, image in done.done],
            refused=sorted(failed),
        )
        headers = [PageHeader.of(page) if page is not None else None for page in pages]
        return RemoteResult(headers, processed, report)


def render(request: list[tuple[Any, int]], report: AddReport) -> list[Page | None]:
    """Render the requested pages, opening each document once; a page (or document) that
    fails is reported with its file, page and reason, and is None."""
    pages: list[Page | None] = []
    documents: dict[int, Any] = {}
    try:
        for opener, page_no in request:
            try:
                document = documents.get(id(opener))
                if document is None:
                    document = documents[id(opener)] = opener()
                pages.append(document.page(page_no))
            except IngestError as error:
                report.fail(error.path, error.reason, page_no)
                pages.append(None)
    finally:
        for document in documents.values():
            document.close()
    return pages


def slim(encoding: Any) -> Any:
    """The part of a page's encoding the driver needs (token count and patch grid), so the raw
    vectors and attention statistics do not travel back."""
    empty = np.zeros((encoding.n_tokens, 0), np.float32)
    return replace(encoding, vectors=empty, centrality=None, eos_attention=None)


# ----------------------------------------------------------------- the driver side
@dataclass
class RayOptions:
    """How to use the cluster: ``actors`` encoder actors (default: one per GPU, else one per
    CPU), each with ``num_gpus`` GPUs (default: 1 when the cluster has GPUs) or ``num_cpus``
    CPUs; at most ``in_flight`` batches out at once (default: two per actor). With no result
    for ``stall_timeout_s`` seconds, or actors not started after ``start_timeout_s``, the run
    stops with `RayStalledError`. ``json_report``: the fields of the JSON object a watchdog
    prints on stdout, with its ``error``, when Ray ends the driver without a word (a lost head
    node; `vrag index --json` passes the index path); the one-line error on stderr is printed
    either way."""

    address: str | None = "auto"
    actors: int | None = None
    num_gpus: float | None = None
    num_cpus: float = 1.0
    in_flight: int | None = None
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    json_report: Mapping[str, Any] | None = None


class ActorPool:
    """The encoder actors, with ordered results and resubmission when an actor dies."""

    def __init__(
        self, ray: Any, actors: list[Any], stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    ) -> None:
        self.ray = ray
        self.actors = actors
        self.stall_timeout_s = stall_timeout_s
        self._next = 0

    def submit(self, unit: WorkUnit) -> tuple[Any, Any]:
        if not self.actors:
            raise RayWorkersLostError(
                "every Ray encoder actor died (their nodes left the cluster); the pages "
                "committed so far are kept: run the same command again to resume"
            )
        actor = self.actors[self._next % len(self.actors)]
        self._next += 1
        return actor, actor.process.remote(unit.request())

    def result(self, unit: WorkUnit, actor: Any, ref: Any) -> RemoteResult:
        """The unit's result; when its actor died, or the node holding its finished result
        did, the unit runs again on another actor."""
        from ray.exceptions import ActorUnavailableError, ObjectLostError, RayActorError

        while True:
            try:
                result: RemoteResult = wait_for(self.ray, ref, self.stall_timeout_s, "a result")
                return result
            except (RayActorError, ActorUnavailableError) as error:
                log.warning("a Ray encoder actor died (%s); its batch runs again", _first(error))
                if actor in self.actors:
                    self.actors.remove(actor)
            except ObjectLostError as error:
                log.warning(
                    "a batch's result was lost with its node (%s); it runs again", _first(error)
                )
            actor, ref = self.submit(unit)


def start_actors(
    ray: Any, config: Mapping[str, Any], options: RayOptions, ocr_mode: str
) -> ActorPool:
    """One `PageWorker` actor per GPU (or CPU) of the cluster, spread over its nodes, each
    loading the model and compressor the index's recorded ``config`` names."""
    resources = ray.cluster_resources()
    gpus = options.num_gpus
    if gpus is None:
        gpus = 1.0 if resources.get("GPU", 0) >= 1 else 0.0
    if options.actors is not None:
        count = options.actors
    elif gpus:
        count = int(resources.get("GPU", 0) // gpus)
    else:
        count = int(resources.get("CPU", 1) // options.num_cpus)
    count = max(count, 1)
    remote = ray.remote(PageWorker).options(
        num_gpus=gpus,
        num_cpus=0 if gpus else options.num_cpus,
        max_restarts=0,
        scheduling_strategy="SPREAD",
    )
    device = "cuda" if gpus else "cpu"
    actors = [remote.remote(dict(config), device, ocr_mode) for _ in range(count)]
    ready = [actor.ready.remote() for actor in actors]
    wait_for(ray, ready, options.start_timeout_s, "the actors to start")  # a broken model: once
    log.info("%d Ray encoder actors on %s", count, device)
    return ActorPool(ray, actors, options.stall_timeout_s)


def wait_for(ray: Any, refs: Any, timeout_s: float, what: str) -> Any:
    """`ray.get` that gives up after ``timeout_s`` with `RayStalledError` (a plain `ray.get`
    waits for ever on a hung or stopped worker)."""
    from ray.exceptions import GetTimeoutError

    try:
        return ray.get(refs, timeout=timeout_s)
    except GetTimeoutError:
        raise RayStalledError(
            f"waited {timeout_s:g} s for {what} from the Ray encoder actors without an answer "
            "(a worker hung or its node stopped, or the cluster has no room for the actors); "
            "the pages committed so far are kept: check the cluster (`ray status`), then run "
            "the same command again to resume, or give slow batches more time with "
            "--ray-timeout (RayOptions.stall_timeout_s; start_timeout_s for starting actors)"
        ) from None


WATCHDOG = Path(__file__).with_name("driver_watch.py")


def gcs_address(ray: Any, address: str | None) -> str:
    """The cluster's GCS ``host:port`` this driver is connected to (``address`` where Ray
    does not say)."""
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # a Ray client connection, a Ray without the field
        return str(address or "")


class DriverWatch:
    """The driver's side of `vrag_compress.driver_watch`: a small process that shares this
    process's stdout and stderr, is told of every commit, and prints the error (and the
    ``--json`` object) when this process ends without saying "done" (Ray's ``_exit(1)`` on a
    lost head node). Any Python outcome, success or exception, says "done" on the way out."""

    def __init__(self, options: RayOptions, gcs: str) -> None:
        address = options.address
        shown = gcs if address in (None, "", "auto", "local") else str(address)
        self.address, self.gcs = shown, gcs
        self.progress: dict[str, int] = {}
        fields = dict(options.json_report) if options.json_report is not None else None
        try:
            self._process: subprocess.Popen[str] | None = subprocess.Popen(
                [sys.executable, "-I", str(WATCHDOG)], stdin=subprocess.PIPE, text=True
            )
        except OSError as error:
            log.warning(
                "no watchdog for this Ray driver (%s): a lost head node ends it without a message",
                error,
            )
            self._process = None
        self._send({"address": shown, "gcs": gcs, "json": fields})

    def _send(self, event: dict[str, Any]) -> None:
        process = self._process
        if process is None or process.stdin is None:
            return
        try:
            process.stdin.write(json.dumps(event, default=str) + "\n")
            process.stdin.flush()
        except (OSError, ValueError):  # the watchdog is gone: the run goes on without it
            self._process = None

    def writing(self, report: AddReport, pages: int) -> None:
        """What is committed so far, and how many pages are being written now (Ray may end
        the driver in the middle of a write: that batch is in the index whole or not at all)."""
        committed = {"pages": report.pages_indexed, "documents": len(report.documents_indexed)}
        self.progress = {**committed, "writing": pages}
        self._send(self.progress)

    def cluster_lost(self) -> RayClusterLostError | None:
        """The error to raise in place of a failed run's own when the cluster's head no longer
        answers (Ray raised, e.g. every actor lost, instead of ending the driver)."""
        if not self.gcs or reachable(self.gcs):
            return None
        return RayClusterLostError(describe(self.address, self.progress, True, ended_by_ray=False))

    def close(self) -> None:
        """The driver reports the outcome itself: the watchdog leaves without a word."""
        process = self._process
        self._send({"done": True})
        if process is None:
            return
        if process.stdin is not None:
            try:
                process.stdin.close()
            except OSError:
                pass
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._process = None

    def __enter__(self) -> DriverWatch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def units(states: Iterable[DocState], batch_size: int) -> Iterator[WorkUnit]:
    """The planned documents' remaining pages in batches of ``batch_size``, in plan order; a
    document is finished with the unit that holds its last page."""
    unit = WorkUnit()
    for state in states:
        for page_no in range(state.last_page + 1, (state.record.n_pages or 0) + 1):
            unit.items.append((state, page_no))
            if len(unit.items) >= batch_size:
                yield unit
                unit = WorkUnit()
        unit.finishing.append(state)
    if unit.items or unit.finishing:
        yield unit


def add_on_ray(
    indexer: Indexer,
    items: Any,
    metadata: dict[str, Any],
    *,
    progress: bool,
    page_ocr: PageOcr,
    options: RayOptions,
) -> AddReport:
    """`VisualIndex.add` with the compute on Ray and the commits here, through ``indexer``
    (`VisualIndex.indexer`, see the module doc)."""
    if isinstance(items, (list, tuple)) and items and all(isinstance(i, Page) for i in items):
        raise VisualIndexError("ray= indexes files and folders; rendered Pages are added locally")
    ray = connect(options.address)
    report = AddReport(ocr_mode=page_ocr.mode)
    started = time.perf_counter()
    with IndexProgress(0, enabled=progress) as bar:
        planned = indexer.plan(items, metadata, report, bar)
        first = next(planned, None)
        if first is not None:  # something to do: only then start the actors (and the model)
            with DriverWatch(options, gcs_address(ray, options.address)) as watch:
                try:
                    pool = start_actors(ray, indexer.store.config, options, page_ocr.mode)
                    limit = options.in_flight or 2 * len(pool.actors)
                    work = units(_chain(first, planned), indexer.batch_size)
                    run_units(indexer, pool, work, limit, report, bar, watch=watch)
                except Exception as error:  # actors lost, a stall, Ray's own: was it the head?
                    lost = watch.cluster_lost()
                    if lost is None:
                        raise
                    raise lost from error
        bar.discovery_done()
    report.seconds = time.perf_counter() - started
    return report


def run_units(
    indexer: Indexer,
    pool: ActorPool,
    work: Iterable[WorkUnit],
    limit: int,
    report: AddReport,
    bar: IndexProgress,
    watch: DriverWatch | None = None,
) -> None:
    """Keep up to ``limit`` units on the actors and commit their results in plan order
    (telling ``watch`` what is being written and what is committed)."""
    in_flight: deque[tuple[WorkUnit, Any, Any]] = deque()
    for unit in work:
        in_flight.append((unit, *pool.submit(unit)) if unit.items else (unit, None, None))
        while len(in_flight) >= limit:
            commit(indexer, pool, *in_flight.popleft(), report, bar, watch)
    while in_flight:
        commit(indexer, pool, *in_flight.popleft(), report, bar, watch)


def commit(
    indexer: Indexer,
    pool: ActorPool,
    unit: WorkUnit,
    actor: Any,
    ref: Any,
    report: AddReport,
    bar: IndexProgress,
    watch: DriverWatch | None = None,
) -> None:
    """Write one unit's result through the single writer, then finish its documents."""
    if unit.items:
        result = pool.result(unit, actor, ref)
        merge(report, result.report)
        batch = [
            (state, page if page is not None else page_no)
            for (state, page_no), page in zip(unit.items, result.pages, strict=True)
        ]
        if watch is not None:
            watch.writing(report, len(result.processed.done))
        indexer.write(batch, result.processed, report, bar)
    indexer.finish(unit.finishing, report)
    if watch is not None:
        watch.writing(report, 0)


def merge(report: AddReport, remote: AddReport) -> None:
    """A worker's failures and OCR notes, into the run's report."""
    report.failures.extend(remote.failures)
    report.ocr_pages.extend(remote.ocr_pages)
    report.ocr_failures.extend(remote.ocr_failures)


def _first(error: Exception) -> str:
    """The first line of a Ray error (they run to dozens of lines of internals)."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _chain(first: DocState, rest: Iterator[DocState]) -> Iterator[DocState]:
    yield first
    yield from rest


__all__ = [
    "RayClusterLostError",
    "RayOptions",
    "RayStalledError",
    "RayUnavailableError",
    "RayWorkersLostError",
    "add_on_ray",
]
