"""tools/system_deps.py: what `make demo` / `make test` install on a fresh Debian machine.

Nothing is installed here: a fake missing package goes through --dry-run, and the decision logic
(root, sudo, neither) is checked directly.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "system_deps.py"


def _module():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("system_deps", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["system_deps"] = module
    spec.loader.exec_module(module)
    return module


deps = _module()


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_the_shipped_list_names_what_the_tests_need() -> None:
    packages = {r.package: r.check for r in deps.read_list(deps.DEFAULT_LIST)}
    assert packages["poppler-utils"] == "cmd:pdftoppm"
    assert packages["libgl1"] == "lib:libGL.so.1"
    assert packages["libglib2.0-0"] == "lib:libglib-2.0.so.0"


def test_present_requirements_are_left_alone(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text(f"python3-fake  cmd:{Path(sys.executable).name}  this interpreter\n")
    result = _run("--list", str(listing))
    assert result.returncode == 0
    assert "all 1 present" in result.stdout


def test_a_missing_package_is_planned_with_apt_get(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text(
        "# comment line\n"
        "vrag-fake-tool   cmd:vrag-no-such-command-xyz   a fake tool\n"
        "vrag-fake-lib    lib:libvragnosuchlib.so.7      a fake library\n"
        "vrag-fake-file   file:/nonexistent/vrag/marker  a fake file\n"
    )
    missing = [r for r in deps.read_list(listing) if not deps.is_present(r)]
    assert [r.package for r in missing] == ["vrag-fake-tool", "vrag-fake-lib", "vrag-fake-file"]
    result = _run("--list", str(listing), "--dry-run")
    if deps.shutil.which("apt-get") is None:
        assert result.returncode == 1
        assert "install the equivalents of: vrag-fake-tool" in result.stderr
        return
    if result.returncode == 1:  # not root and no password-less sudo: told what to run
        assert "sudo apt-get install -y vrag-fake-tool vrag-fake-lib" in result.stderr
        return
    assert result.returncode == 0, result.stderr
    assert "apt-get install -y -q --no-install-recommends vrag-fake-tool" in result.stdout


@pytest.mark.parametrize(
    ("root", "sudo", "prefix"),
    [(True, False, []), (False, True, ["sudo", "-n"]), (False, False, None)],
)
def test_root_then_sudo_else_explain(root: bool, sudo: bool, prefix, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(deps.shutil, "which", lambda name: f"/usr/bin/{name}")
    commands = deps.install_commands(["poppler-utils"], root=root, sudo=sudo)
    if prefix is None:
        assert commands is None
        return
    assert commands[0][: len(prefix)] == prefix
    assert commands[-1][-1] == "poppler-utils"
    assert "install" in commands[-1]


def test_without_apt_get_it_says_what_to_install(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(deps.shutil, "which", lambda name: None)
    assert deps.install_commands(["libgl1"], root=True, sudo=False) is None
    missing = [deps.Requirement("libgl1", "lib:libGL.so.1", "OpenCV")]
    assert "install the equivalents of: libgl1" in deps.explain(missing)


def test_a_malformed_list_is_refused(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("poppler-utils pdftoppm\n")
    result = _run("--list", str(listing))
    assert result.returncode == 2
    assert "list.txt:1" in result.stderr


def test_the_demo_installs_no_browser_and_the_tests_do() -> None:
    demo = {r.package for r in deps.read_list(deps.DEFAULT_LIST)}
    tests = {r.package for r in deps.read_list(deps.TEST_LIST)}
    assert {"chromium", "chromium-driver"} <= tests and not {"chromium", "chromium-driver"} & demo


def _make_dry_run(target: str) -> str:
    # -n prints the recipes without running them; -B as if nothing were built yet
    run = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_make_demo_installs_the_demo_packages_and_make_test_the_browser_too() -> None:
    demo = [line for line in _make_dry_run("demo").splitlines() if "system_deps.py" in line]
    assert demo and all("--tests" not in line for line in demo)
    test = [line for line in _make_dry_run("test").splitlines() if "system_deps.py" in line]
    assert any("--tests" in line for line in test)


def test_the_tests_flag_plans_both_lists(tmp_path: Path) -> None:
    run = _run("--tests", "--dry-run")
    assert run.returncode in (0, 1), run.stderr
    listed = run.stdout + run.stderr
    if "all" in run.stdout and "present" in run.stdout:  # this machine has them all
        assert f"all {len(deps.read_list(deps.DEFAULT_LIST)) + 2} present" in run.stdout
    else:
        assert "chromium" in listed
