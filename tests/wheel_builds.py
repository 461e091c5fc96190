"""``python tests/wheel_builds.py OUTDIR SRCDIR...``: ``python -m build --no-isolation --outdir
OUTDIR SRCDIR`` for each source folder, in one process (tests/test_wheels.py).

`build` runs every backend hook (dependency check, sdist, wheel) as a fresh interpreter that
imports setuptools and the ``egg_info.writers`` entry points again (in this environment one of
them imports huggingface_hub, httpx and trio: about a second a hook). Here each hook still runs
in a process of its own, the same ``_in_process.py`` script, but forked from this one, which has
imported them once. The distributions built are the same.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import traceback
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points


def preload() -> None:
    """Import what every setuptools hook imports: the backend and the egg_info writers."""
    import setuptools.build_meta  # noqa: F401

    for entry_point in entry_points(group="egg_info.writers"):
        entry_point.load()


def forked_runner(
    cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None
) -> None:
    """`pyproject_hooks.default_subprocess_runner`, with a fork of this process for the fresh
    ``python _in_process.py HOOK CONTROL_DIR`` interpreter; raises CalledProcessError alike."""
    python, script, *args = cmd
    assert os.path.samefile(python, sys.executable), cmd  # --no-isolation: this interpreter
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _run_hook_script(script, args, cwd, extra_environ or {})
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise subprocess.CalledProcessError(code, list(cmd))


def _run_hook_script(
    script: str, args: list[str], cwd: str | None, extra_environ: Mapping[str, str]
) -> None:
    """In the forked child: run the hook script as ``python script args`` would; never return."""
    code = 1
    try:
        if cwd is not None:
            os.chdir(cwd)
        os.environ.update(extra_environ)
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(script)  # as for a script run by path
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(outdir: str, sources: Sequence[str]) -> None:
    """Build each source folder's sdist, then its wheel from that sdist, as `build` does."""
    import pyproject_hooks
    from build.__main__ import main as build_main

    preload()
    pyproject_hooks.default_subprocess_runner = forked_runner  # read by build at each build
    for source in sources:
        build_main(["--no-isolation", "--outdir", outdir, source], prog="python -m build")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
