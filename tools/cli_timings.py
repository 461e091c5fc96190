"""Wall time of fresh `vrag` processes, per command and search mode, in one run (JSON on stdout).

    python tools/cli_timings.py INDEX "QUERY" [--repeat 3]

Each command runs ``--repeat`` times as ``python -m vrag_compress ...``, interleaved round by round
so that the machine's load weighs on every row alike; ``floor_torch_transformers`` is a process
that only imports torch and transformers' modeling code (with vrag's torchvision fix), what a
query encoder cannot avoid.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def commands(index: str, query: str) -> dict[str, list[str]]:
    vrag = [sys.executable, "-m", "vrag_compress"]
    search = [*vrag, "search", index, query, "--json", "--mode"]
    return {
        "python_startup": [sys.executable, "-c", "pass"],
        "version": [*vrag, "--version"],
        "help": [*vrag, "--help"],
        "info": [*vrag, "info", index, "--json"],
        "search_text": [*search, "text"],
        "search_exact": [*search, "exact"],
        "search_auto": [*search, "auto"],
        "floor_torch_transformers": [
            sys.executable,
            "-c",
            "from vrag_compress.compat import ensure_torchvision_importable as fix\n"
            "fix()\nimport transformers.modeling_utils",
        ],
    }


def wall_s(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index")
    parser.add_argument("query")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = commands(args.index, args.query)
    times: dict[str, list[float]] = {name: [] for name in runs}
    load_before = os.getloadavg()[0]
    for _ in range(args.repeat):
        for name, command in runs.items():
            times[name].append(wall_s(command))
    result = {
        name: {"median_s": round(statistics.median(t), 3), "min_s": round(min(t), 3)}
        for name, t in times.items()
    }
    meta = {"repeat": args.repeat, "load_1min": [load_before, os.getloadavg()[0]]}
    print(json.dumps({"commands": result, **meta}, indent=2))


if __name__ == "__main__":
    main()
