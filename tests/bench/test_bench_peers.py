"""`vrag bench store --against muvera,fast-plaid`: peers on the same pages and queries, scored
against the same exact reference; a peer that cannot run or runs too long is reported, never
dropped. fast-plaid's own Python is replaced by small shell scripts (the real one is a virtual
environment with another torch, see test_bench_plaid.py)."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.cli.app import app
from vrag_compress_bench import peers

SMALL = ["bench", "store", "--pages", "300", "--tokens-full", "60", "--queries", "5"]
SMALL += ["--dim", "16", "--bruteforce-queries", "0", "--no-full-store"]


def _script(path: Path, body: str) -> Path:
    """An executable shell script standing in for fast-plaid's Python."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _exchange(folder: Path, n_pages: int = 40, k: int = 6, dim: int = 8) -> list[np.ndarray]:
    """An exchange folder of random unit pages; its queries (noisy copies of page tokens)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n_pages, k, dim)).astype(np.float32)
    pages = (x / np.linalg.norm(x, axis=2, keepdims=True)).astype(np.float16)
    queries = [pages[i, :4].astype(np.float32) + 0.1 for i in (3, 17, 29)]
    peers.write_pages(folder, pages, queries, threads=1)
    return queries


def _exact_ids(folder: Path, queries: list[np.ndarray]) -> list[list[str]]:
    """The exact top 10 as `add_all`'s page ids (what `vrag bench store` hands the peers)."""
    from vrag_compress.scoring.packed import maxsim_scores, top_k

    tokens, bounds = np.load(folder / "pages.npy"), np.load(folder / "bounds.npy")
    scores = maxsim_scores(queries, tokens, bounds)
    return [[f"page-{p:07d}" for p in top_k(row, 10)] for row in scores]


def test_peers_in_the_same_run(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    args = [*SMALL, "--against", "muvera,fast-plaid", "--plaid-python", "/nonexistent/python"]
    res = CliRunner().invoke(app, [*args, "--dir", str(tmp_path), "--json", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    muvera = report["peers"]["muvera"]
    assert muvera["status"] == "ok" and 0.0 <= muvera["recall@10"] <= 1.0
    assert muvera["p50_ms"] > 0 and muvera["build_s"] > 0
    # its index holds a 20 x 32 x 16 float FDE per page; it reranks on the 60 x 16 fp16 vectors
    assert muvera["fde_dim"] == 10240
    assert muvera["bytes_per_page"] > 10240 * 4 + 6 * 16 * 2
    plaid = report["peers"]["fast-plaid"]
    assert plaid["status"] == "unavailable" and "/nonexistent/python" in plaid["reason"]
    assert "fast-plaid==" in plaid["reason"] and "--plaid-python" in plaid["reason"]
    assert all(plaid[key] is None for key in peers.MEASURES)
    lat = report["latency_ms"]
    assert lat["two_stage_p95"] >= lat["two_stage"] > 0
    assert report["config"]["against"] == ["muvera", "fast-plaid"]
    assert not list(tmp_path.glob("vrag-bench-store-*"))  # the exchange folder went with it


def test_a_peer_past_its_timeout_is_reported_and_killed(tmp_path: Path) -> None:
    """fast-plaid's process (here a shell that sleeps in a child) is killed with its group."""
    pid_file = tmp_path / "sleep.pid"
    python = _script(tmp_path / "python", f"sleep 30 &\necho $! > {pid_file}\nwait\n")
    out = tmp_path / "t.json"
    args = ["bench", "store", "--pages", "200", "--tokens-full", "40", "--queries", "3"]
    args += ["--dim", "16", "--bruteforce-queries", "0", "--no-full-store"]
    args += ["--against", "fast-plaid", "--plaid-python", str(python), "--peer-timeout", "1"]
    t0 = time.monotonic()
    res = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert time.monotonic() - t0 < 25
    plaid = json.loads(out.read_text())["peers"]["fast-plaid"]
    assert plaid["status"] == "timeout" and plaid["timeout_s"] == 1.0
    assert "killed" in plaid["reason"] and plaid["p50_ms"] is None
    assert _gone(int(pid_file.read_text()))


def _gone(pid: int, wait_s: float = 3.0) -> bool:
    """The process has ended (a zombie waiting for init counts as ended)."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_muvera_past_its_timeout_is_reported(tmp_path: Path) -> None:
    queries = _exchange(tmp_path)
    report = peers.run_peers(
        ["muvera"],
        tmp_path,
        queries,
        _exact_ids(tmp_path, queries),
        timeout_s=0.0,
        plaid_python=Path("/nonexistent/python"),
        muvera_candidates=10,
    )
    muvera = report["muvera"]
    assert muvera["status"] == "timeout" and muvera["timeout_s"] == 0.0
    assert "building" in muvera["reason"] and muvera["recall@10"] is None


def test_muvera_finds_the_exact_top10_when_it_reranks_every_page(tmp_path: Path) -> None:
    """With all pages as candidates the rerank is exact MaxSim over the same fp16 vectors."""
    queries = _exchange(tmp_path, n_pages=40)
    exact = [peers._positions(ids) for ids in _exact_ids(tmp_path, queries)]
    muvera = peers.muvera_peer(tmp_path, queries, exact, candidates=40, timeout_s=60)
    assert muvera["recall@10"] == 1.0
    # identity projection at 8 dims: 20 repetitions x 32 partitions x 8 floats
    assert muvera["fde_dim"] == 20 * 32 * 8 and muvera["settings"]["projection"] == "identity"
    assert muvera["bytes_per_page"] > 20 * 32 * 8 * 4 + 6 * 8 * 2


def test_muvera_without_its_package_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "muvera", None)  # `import muvera` now fails
    got = peers.muvera_peer(tmp_path, [], [], candidates=10, timeout_s=60)
    assert got["status"] == "unavailable"
    assert "pip install 'vrag-compress[bench]'" in got["reason"]


def test_fast_plaid_results_are_read_and_scored(tmp_path: Path) -> None:
    """A stand-in for fast-plaid's Python writes `results.json` as the runner does."""
    queries = _exchange(tmp_path)
    exact = [peers._positions(ids) for ids in _exact_ids(tmp_path, queries)]
    results = {
        "build_s": 2.0,
        "latency_ms": [3.0, 5.0, 4.0],
        "top": [top[:5] for top in exact],
        "index_bytes": 4000,
        "versions": {"fast_plaid": "stand-in"},
        "settings": {"nbits": 4, "device": "cpu"},
    }
    fake = tmp_path / "fake_runner.py"  # called as the runner is: RUNNER FOLDER
    fake.write_text(
        f"import sys\nopen(sys.argv[2] + '/results.json', 'w').write({json.dumps(results)!r})\n"
    )
    python = _script(tmp_path / "python", f'exec {sys.executable} {fake} "$@"\n')
    got = peers.plaid_peer(tmp_path, exact, python, timeout_s=60)
    assert got["status"] == "ok" and got["recall@10"] == 0.5 and got["p50_ms"] == 4.0
    assert got["build_s"] == 2.0 and got["bytes_per_page"] == 100.0


def test_fast_plaid_python_without_fast_plaid_is_unavailable(tmp_path: Path) -> None:
    _exchange(tmp_path)
    message = "ModuleNotFoundError: No module named 'fast_plaid'"
    python = _script(tmp_path / "python", f'echo "{message}" >&2\nexit 1\n')
    got = peers.plaid_peer(tmp_path, [[0]] * 3, python, timeout_s=60)
    assert got["status"] == "unavailable" and "fast_plaid" in got["reason"]
    assert "fast-plaid==" in got["reason"]
    crash = _script(tmp_path / "crash", 'echo "RuntimeError: out of memory" >&2\nexit 1\n')
    got = peers.plaid_peer(tmp_path, [[0]] * 3, crash, timeout_s=60)
    assert got["status"] == "failed" and "out of memory" in got["reason"]


def test_an_unknown_peer_is_a_usage_error() -> None:
    res = CliRunner().invoke(app, [*SMALL, "--against", "muvera,colbert"])
    assert res.exit_code == 2 and "--against" in res.output and "colbert" in res.output
    res = CliRunner().invoke(app, [*SMALL, "--against", "muvera", "--backend", "qdrant-local"])
    assert res.exit_code == 2 and "--against" in res.output


def test_default_fast_plaid_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VRAG_FAST_PLAID_PYTHON", raising=False)
    assert peers.default_plaid_python() == Path("/tmp/fastplaid/bin/python")
    monkeypatch.setenv("VRAG_FAST_PLAID_PYTHON", os.devnull)
    assert peers.default_plaid_python() == Path(os.devnull)
