"""Micro-batching: concurrent callers' requests run as one batch (one encoder forward, one store
call) instead of one after another.

Why: a query forward over 8 queries costs far less than 8 forwards, and the store's
`search_many` scores a batch of queries in one pass over the vectors. There is no worker thread:
the first caller that finds no batch running leads, gathers what is waiting (up to
``max_batch``), runs it in its own thread and hands every caller its own answer or error; the
others wait for theirs or lead the next batch. A lone caller never waits: the gathering window
(``window_s``) is only spent while recent batches showed concurrent callers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

R = TypeVar("R")
T = TypeVar("T")

MAX_BATCH = 16
WINDOW_S = 0.003
"""How long a leader waits for more requests once concurrency was seen (a few ms: about one
HTTP round trip on loopback, small next to a query forward)."""


class _Item(Generic[R, T]):
    __slots__ = ("done", "error", "request", "result")

    def __init__(self, request: R) -> None:
        self.request = request
        self.done = False
        self.result: T | None = None
        self.error: BaseException | None = None


class MicroBatcher(Generic[R, T]):
    """Calls ``run(requests)`` on batches of concurrent requests; ``run`` returns one answer per
    request, in order, where an exception instance is raised to that request's caller only."""

    def __init__(
        self,
        run: Callable[[list[R]], Sequence[T | BaseException]],
        *,
        max_batch: int = MAX_BATCH,
        window_s: float = WINDOW_S,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._run = run
        self.max_batch = max_batch
        self.window_s = window_s
        self._cond = threading.Condition()
        self._pending: list[_Item[R, T]] = []
        self._leading = False
        self._concurrent = False  # the last batch had more than one request
        self.batches = 0
        self.requests = 0

    def __call__(self, request: R) -> T:
        item: _Item[R, T] = _Item(request)
        with self._cond:
            self._pending.append(item)
            self._cond.notify_all()  # a leader gathering its batch may take this one too
        while True:
            with self._cond:
                while not item.done and self._leading:
                    self._cond.wait()
                if item.done:
                    break
                self._leading = True
                batch = self._gather()
            try:
                self._answer(batch)
            finally:
                with self._cond:
                    self._leading = False
                    self._cond.notify_all()
        if item.error is not None:
            raise item.error
        return item.result  # type: ignore[return-value]

    def _gather(self) -> list[_Item[R, T]]:
        """Up to ``max_batch`` waiting items (called holding the condition)."""
        if self._concurrent and self.window_s > 0:
            deadline = time.monotonic() + self.window_s
            while len(self._pending) < self.max_batch:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
        self._concurrent = len(batch) > 1
        self.batches += 1
        self.requests += len(batch)
        return batch

    def _answer(self, batch: list[_Item[R, T]]) -> None:
        """Run one batch and mark every item done (an error in ``run`` goes to all of them)."""
        try:
            answers = list(self._run([item.request for item in batch]))
            if len(answers) != len(batch):
                raise RuntimeError(f"batch of {len(batch)} got {len(answers)} answers")
        except BaseException as error:  # noqa: BLE001 (handed to every caller of the batch)
            answers = [error] * len(batch)
        with self._cond:
            for item, answer in zip(batch, answers, strict=True):
                if isinstance(answer, BaseException):
                    item.error = answer
                else:
                    item.result = answer
                item.done = True
