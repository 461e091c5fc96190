"""Progress display: long indexing runs (pages/s and ETA), and the plain counting bar that the
other long commands (calibrate, migrate, benchmarks) show on stderr."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def counted(number: int, noun: str) -> str:
    """`1 file`, `2 files`: a count with its noun in the right number."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def task_progress(console: Console | None = None, *, disable: bool = False) -> Progress:
    """A bar per task: description, bar, done/total and elapsed time, on stderr by default
    (stdout stays the command's report)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console or Console(stderr=True),
        disable=disable,
    )


class IndexProgress:
    """A rich progress bar counting pages, with throughput and time remaining."""

    def __init__(self, total: int, *, enabled: bool = True, description: str = "indexing") -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not enabled,
            transient=False,
        )
        self._task = self._progress.add_task(description, total=total, rate="")
        self._description = description
        self._files = 0

    def discover(self, files: int = 0, pages: int = 0) -> None:
        """Files found and pages planned so far, while the folders are still being walked: the
        total grows and the label shows how many files were found."""
        self._files += files
        task = self._progress.tasks[0]
        self._progress.update(
            self._task,
            total=(task.total or 0) + pages,
            description=f"{self._description} (discovering: {counted(self._files, 'file')})",
        )

    def discovery_done(self) -> None:
        """Every file has been found: the total is final."""
        self._progress.update(
            self._task, description=f"{self._description} {counted(self._files, 'file')}"
        )

    def advance(self, pages: int) -> None:
        self._progress.advance(self._task, pages)
        speed = self._progress.tasks[0].speed
        if speed:
            self._progress.update(self._task, rate=f"{speed:.2f} pages/s")

    def __enter__(self) -> IndexProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._progress.tasks[0].total:  # no page to index (every file failed): no "0/0"
            self._progress.update(self._task, visible=False)
        self._progress.stop()
