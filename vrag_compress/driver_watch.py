"""A watchdog for a Ray indexing driver: says what happened when the driver dies without a word.

Why a process of its own: Ray ends a driver whose Ray node went away (the head killed, the
local raylet and object store gone) from C++ with ``_exit(1)`` ("The connection to the plasma
store is failed. Terminate the process." in the driver's Ray log): no exception, no ``finally``,
no Python code of the driver runs, so the driver itself cannot say anything. This small process
shares the driver's stdout and stderr and learns of each commit through a pipe; when the pipe
ends without the driver's "done", it prints the one-line error (and the ``--json`` object) the
driver could not.

Standard library only: `vrag_compress.distributed` runs this file by path (``python -I``), so
it starts in tens of milliseconds and never imports the package, torch or Ray.

The protocol, one JSON object a line on this process's stdin: first the setup ``{"address",
"gcs", "json"}`` (``json``: the fields of the ``--json`` object, or null without ``--json``);
then ``{"pages", "documents", "writing"}`` before and after every write (the pages committed
so far, the documents finished, the pages of the batch being written); ``{"done": true}``
once the driver's own code takes over again (the run returned or raised, and says so itself).
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import time
from typing import Any, TextIO

LOST = "RayClusterLostError"
DIED = "RayDriverLostError"


def reachable(address: str, timeout_s: float = 3.0) -> bool:
    """Whether something still listens at ``host:port`` (the cluster's GCS)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return False
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


SETTLE_S = 3.0  # how long a head must keep answering to count as alive (see `still_answers`)


def still_answers(address: str, settle_s: float = SETTLE_S, step_s: float = 0.25) -> bool:
    """Whether the cluster's GCS answers, and keeps answering for ``settle_s``. A killed head
    takes the driver's local node down first, and its GCS can still accept connections for a
    moment after the driver ended: one check then would call a lost cluster alive."""
    deadline = time.monotonic() + settle_s
    while reachable(address):
        if time.monotonic() >= deadline:
            return True
        time.sleep(step_s)
    return False


def describe(address: str, progress: dict[str, int], gone: bool, ended_by_ray: bool) -> str:
    """What went away, what was kept and how to resume (``progress``: the last commit's
    "pages", "documents" and "writing"; ``gone``: the cluster no longer answers)."""
    if gone:
        what = (
            f"the Ray cluster at {address} went away (its head node stopped or cannot be reached)"
            + (" and Ray ended this driver at once" if ended_by_ray else "")
        )
    else:
        what = (
            "this driver ended without reporting an error while the Ray cluster at "
            f"{address} still answers (its local Ray node died, or the process was killed: "
            "kill -9, out of memory)"
        )
    pages, documents = progress.get("pages", 0), progress.get("documents", 0)
    writing = progress.get("writing", 0)
    then = f", plus {_count(writing, 'page')} being written" if writing else ""
    return (
        f"{what}; this run committed {_count(pages, 'page')} "
        f"({_count(documents, 'document')} whole){then} before that; what the index holds is "
        "whole and searchable (each batch is committed whole or not at all); once the cluster "
        "is back, run the same command again to resume: finished documents are skipped and a "
        "partly indexed one goes on after its last committed page"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def watch(lines: TextIO, out: TextIO, err: TextIO) -> int:
    """Follow the driver's lines until the pipe ends; report when it ends without "done"."""
    setup: dict[str, Any] | None = None
    progress: dict[str, int] = {}
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("done"):
            return 0
        if setup is None:
            setup = event
            continue
        progress = {key: int(event.get(key, 0)) for key in ("pages", "documents", "writing")}
    if setup is None:  # the driver died before it said anything: nothing to report
        return 0
    gone = not still_answers(str(setup.get("gcs") or ""))
    address = str(setup.get("address") or setup.get("gcs") or "?")
    text = f"{LOST if gone else DIED}: {describe(address, progress, gone, ended_by_ray=True)}"
    fields = setup.get("json")
    try:
        if isinstance(fields, dict):
            out.write(json.dumps({**fields, "error": text}, indent=2) + "\n")
            out.flush()
        newline = "\n" if err.isatty() else ""  # after a progress bar left mid-line
        err.write(f"{newline}error: {text}\n")
        err.flush()
    except OSError:  # nobody reads the driver's output any more
        pass
    return 1


def main() -> int:
    # Ctrl-C reaches the whole process group: the driver handles it and says "done"
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return watch(sys.stdin, sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
