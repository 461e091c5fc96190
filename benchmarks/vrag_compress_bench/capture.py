"""`vrag bench capture`: memory and time of attention-statistics capture modes.

Each mode runs in its own child process (same model, same input) so that the resident-set
high-water mark (VmHWM, reset after loading) measures that mode's forward pass alone. The
children are forked from one helper interpreter that has already imported torch, transformers
and colpali_engine, so those imports (most of a child's CPU time) are paid once, not per mode:
  plain      the embedding forward (decoder SDPA), no statistics
  streaming  the same forward with streaming capture (attention statistics per layer)
  eager      the forward with an eager decoder, no statistics (the time yardstick)
  naive      eager decoder + output_attentions=True, statistics from the kept maps
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import closing, nullcontext
from pathlib import Path
from typing import Any

import typer

from vrag_compress_bench.app import bench_app

MODES = ("plain", "streaming", "eager", "naive")
_MB = 2**20


@bench_app.command("capture")
def bench_capture(
    model: str = typer.Option("tiny-colpali", help="tiny-colpali, tiny-colqwen2, hub id or folder"),
    image_size: int | None = typer.Option(
        None,
        help="tiny models: ColPali input side (448 = 1024 tokens); ColQwen2 longest side "
        "(1568 = 3136 tokens). Also the side of the square test page.",
    ),
    layers: int = typer.Option(18, help="decoder layers (tiny models only)"),
    heads: int = typer.Option(8, help="attention heads (tiny models only)"),
    repeats: int = typer.Option(2, min=1, help="forward passes per mode (time = fastest)"),
    threads: int = typer.Option(1, min=1, help="torch CPU threads in each child"),
    naive_limit_gb: float = typer.Option(
        8.0, help="skip the naive mode (null) when its maps alone would exceed this"
    ),
    json_out: Path | None = typer.Option(None, "--json", help="write the results here"),
) -> None:
    """Peak memory and time of plain forward vs streaming capture vs naive output_attentions."""
    from rich.console import Console
    from rich.progress import Progress

    from vrag_compress.encoders.tiny import TINY_MODELS

    tiny = model in TINY_MODELS
    size = image_size or (448 if model == "tiny-colpali" else 1568)
    spec = {
        "model": model,
        "image_size": size,
        "tiny": {"image_size": size, "layers": layers, "heads": heads} if tiny else {},
        "repeats": repeats,
        "threads": threads,
    }
    results: dict[str, dict | None] = {}
    with Progress(transient=True) as progress, closing(_ModeServer(spec)) as server:
        task = progress.add_task("capture modes", total=len(MODES))
        for mode in MODES:
            progress.update(task, description=f"mode {mode}")
            plain = results.get("plain")  # absent until the plain mode has run
            if mode == "naive" and plain and _naive_bytes(plain) > naive_limit_gb * 2**30:
                results[mode] = None
            else:
                results[mode] = server.run(mode)
            progress.advance(task)
    report = _report(model, spec, results, naive_limit_gb)
    _print_table(Console(), report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2) + "\n")


def _naive_bytes(plain: dict) -> float:
    """The float32 attention maps naive capture keeps: layers · heads · seq_len² · 4 bytes."""
    return 4.0 * plain["layers"] * plain["heads"] * plain["seq_len"] ** 2


class _ModeServer:
    """A helper interpreter (`--serve`) that imports the libraries once and forks one child per
    mode, so each mode still gets a process (and a VmHWM) of its own without a fresh import."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.stderr = tempfile.TemporaryFile(mode="w+")  # a file: a full pipe would block
        env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"]), "HF_HUB_OFFLINE": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vrag_compress_bench.capture", "--serve", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=env,
        )

    def run(self, mode: str) -> dict:
        """One mode's result, measured in a child forked for it; BadParameter when it fails."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(mode + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # the helper died while importing: its exit status and stderr say why
        line = self.process.stdout.readline()
        reply: dict[str, Any] = json.loads(line) if line.strip() else {"exit": self.process.wait()}
        if "result" in reply:
            return dict(reply["result"])
        self.stderr.seek(0)
        tail = self.stderr.read().strip().splitlines()[-5:]
        raise typer.BadParameter(f"mode {mode} failed (exit {reply['exit']}): {' | '.join(tail)}")

    def close(self) -> None:
        """End the helper (end of its input) and drop its stderr file."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.stderr.close()


def _report(model: str, spec: dict, results: dict, naive_limit_gb: float) -> dict:
    plain, streaming, eager, naive = (results[m] for m in MODES)
    seq, heads = plain["seq_len"], plain["heads"]
    public = ("peak_mb", "seconds", "base_mb", "extra_mb")

    def slim(r: dict | None) -> dict | None:
        return None if r is None else {k: r[k] for k in public}

    return {
        "model": model,
        "layers": plain["layers"],
        "heads": heads,
        "seq_len": seq,
        "visual_tokens": plain["visual_tokens"],
        "plain": slim(plain),
        "streaming": slim(streaming),
        "naive": slim(naive),
        "eager": slim(eager),
        "two_layer_bound_mb": 2 * heads * seq**2 * 4 / _MB,
        "streaming_minus_plain_mb": streaming["peak_mb"] - plain["peak_mb"],
        "naive_minus_plain_mb": None if naive is None else naive["peak_mb"] - plain["peak_mb"],
        "naive_skipped_over_gb": None if naive is not None else naive_limit_gb,
        "streaming_over_eager_time": streaming["seconds"] / eager["seconds"],
        "streaming_over_plain_time": streaming["seconds"] / plain["seconds"],
        "image_size": spec["image_size"],
        "threads": spec["threads"],
        "repeats": spec["repeats"],
        "memory": "VmHWM of a child process per mode (forked from a helper that has only "
        "imported the libraries), reset after loading the model",
    }


def _print_table(console, report: dict) -> None:
    from rich.table import Table

    table = Table(
        title=f"capture: {report['model']}  L={report['layers']} H={report['heads']} "
        f"S={report['seq_len']} visual={report['visual_tokens']}"
    )
    for column in ("mode", "peak MB", "extra over load MB", "seconds"):
        table.add_column(column, justify="right" if column != "mode" else "left")
    for mode in MODES:
        r = report[mode]
        if r is None:
            table.add_row(mode, "skipped (maps over limit)", "", "")
        else:
            table.add_row(
                mode, f"{r['peak_mb']:.1f}", f"{r['extra_mb']:.1f}", f"{r['seconds']:.3f}"
            )
    console.print(table)
    naive = report["naive_minus_plain_mb"]
    console.print(
        f"streaming - plain = {report['streaming_minus_plain_mb']:.1f} MB "
        f"(2-layer bound {report['two_layer_bound_mb']:.1f} MB); naive - plain = "
        f"{'n/a' if naive is None else f'{naive:.1f} MB'}; streaming / eager time = "
        f"{report['streaming_over_eager_time']:.2f}x"
    )


# ---- child process ---------------------------------------------------------------------------


def _rss_mb(field: str) -> float:
    """VmRSS / VmHWM from /proc (Linux), else the getrusage high-water mark."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> None:
    """Reset VmHWM to the current RSS so the peak covers only what follows (Linux)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _child(mode: str, spec: dict) -> dict:
    import numpy as np
    import torch
    from PIL import Image

    from vrag_compress.encoders import load_encoder
    from vrag_compress.encoders.capture import (
        capture_attention,
        decoder_attention,
        forward_with_attention_maps,
        stats_from_attention_maps,
    )
    from vrag_compress.encoders.colpali import last_token_index

    torch.set_num_threads(spec["threads"])
    encoder = load_encoder(spec["model"], device="cpu", **spec["tiny"])
    size = spec["image_size"]
    pixels = np.random.default_rng(0).integers(0, 256, size=(size, size, 3), dtype=np.uint8)
    batch = encoder.process_pages([Image.fromarray(pixels)])
    visual = batch["input_ids"] == encoder.image_token_id
    last = last_token_index(batch["attention_mask"])

    def forward() -> None:
        if mode == "streaming":
            with capture_attention(encoder.model, visual, last) as capture:
                encoder.model(**batch)
            capture.results()
        elif mode == "naive":
            _, maps = forward_with_attention_maps(encoder.model, batch)
            stats_from_attention_maps(maps, visual, last)
        else:
            encoder.model(**batch)

    base = _rss_mb("VmRSS")
    _reset_peak()
    seconds = []
    eager = decoder_attention(encoder.model, "eager") if mode == "eager" else nullcontext()
    with torch.inference_mode(), eager:
        for _ in range(spec["repeats"]):
            start = time.perf_counter()
            forward()
            seconds.append(time.perf_counter() - start)
    peak = _rss_mb("VmHWM")
    return {
        "mode": mode,
        "peak_mb": peak,
        "base_mb": base,
        "extra_mb": peak - base,
        "seconds": min(seconds),
        "seq_len": int(batch["input_ids"].shape[1]),
        "visual_tokens": int(visual.sum()),
        "layers": encoder.n_layers,
        "heads": encoder.n_heads,
    }


def _preload() -> None:
    """Import what every mode's child imports, before any fork: the bulk of a child's CPU.

    Only imports: no tensor work runs here, so no OpenMP thread pool exists when we fork."""
    import numpy  # noqa: F401
    import PIL.Image  # noqa: F401
    import torch  # noqa: F401

    import vrag_compress.encoders  # noqa: F401
    import vrag_compress.encoders.capture  # noqa: F401
    import vrag_compress.encoders.colpali  # noqa: F401
    import vrag_compress.encoders.tiny  # noqa: F401

    try:
        import colpali_engine.models  # noqa: F401
    except ImportError:  # a model family that needs no colpali_engine still runs
        pass


def _fork_mode(mode: str, spec: dict) -> dict:
    """Run one mode in a forked child; its result, or its exit status when it failed."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into the serve loop
        os.close(read_end)
        os.dup2(2, 1)  # stray prints must not reach the helper's reply stream
        code = 1
        try:
            with os.fdopen(write_end, "w") as out:
                out.write(json.dumps(_child(mode, spec)))
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as reply:
        text = reply.read()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return {"result": json.loads(text)} if code == 0 else {"exit": code}


def _serve(spec: dict) -> None:
    """Preload once, then answer each mode named on stdin with one JSON line on stdout."""
    _preload()
    for line in sys.stdin:
        mode = line.strip()
        if mode:
            sys.stdout.flush()
            sys.stderr.flush()
            print(json.dumps(_fork_mode(mode, spec)), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        _serve(json.loads(sys.argv[2]))
    else:
        print(json.dumps(_child(sys.argv[1], json.loads(sys.argv[2]))))
