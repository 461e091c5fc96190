"""LibreOffice as an install step: `make system-deps-office` installs what the Office-file error
names, `make test` runs it and `make demo` does not."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from vrag_compress.ingest import office

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "system_deps.py"


def _deps():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("system_deps_office", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["system_deps_office"] = module
    spec.loader.exec_module(module)
    return module


def _make(target: str) -> list[str]:
    run = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    return [line for line in run.stdout.splitlines() if "system_deps.py" in line]


def test_the_office_list_is_what_the_error_tells_users_to_install() -> None:
    deps = _deps()
    listed = [r.package for r in deps.read_list(deps.OFFICE_LIST)]
    assert listed == list(office.OFFICE_PACKAGES)
    assert (
        " ".join(listed) in office.INSTALL_HINT and "make system-deps-office" in office.INSTALL_HINT
    )
    demo = {r.package for r in deps.read_list(deps.DEFAULT_LIST)}
    assert not set(listed) & demo


def test_make_test_installs_libreoffice_and_make_demo_does_not() -> None:
    assert not any("--office" in line for line in _make("demo"))
    assert any("--office" in line for line in _make("test"))
    assert _make("system-deps-office") == ["python3 tools/system_deps.py --office"]


def test_the_office_flag_plans_only_libreoffice(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--office", "--dry-run"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode in (0, 1), run.stderr
    if "present" in run.stdout:  # this machine has them
        assert "all 3 present" in run.stdout
    else:
        planned = run.stdout + run.stderr
        assert "libreoffice-impress-nogui" in planned and "chromium" not in planned
