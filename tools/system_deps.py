"""Install the Debian packages listed in tools/system-packages.txt that this machine lacks.

Runs before the virtual environment exists (`make demo`, `make test`), so it uses the standard
library only. As root it runs apt-get; otherwise sudo when it works without a password prompt;
otherwise (or without apt-get) it prints exactly what to install and exits 1.

    python3 tools/system_deps.py              # check and install what is missing
    python3 tools/system_deps.py --dry-run    # print the commands instead of running them
    python3 tools/system_deps.py --list FILE  # another package list (same format; repeatable)
    python3 tools/system_deps.py --tests      # the demo's packages and the tests' (a browser)
    python3 tools/system_deps.py --office     # LibreOffice, which reads Office files
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_LIST = Path(__file__).with_name("system-packages.txt")
TEST_LIST = Path(__file__).with_name("system-packages-test.txt")
OFFICE_LIST = Path(__file__).with_name("system-packages-office.txt")
LIB_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib")


@dataclass(frozen=True)
class Requirement:
    """One Debian package, how to tell it is installed, and why it is needed."""

    package: str
    check: str
    why: str


class ListError(ValueError):
    """The package list has a malformed line."""


def read_list(path: Path) -> list[Requirement]:
    """Parse `NAME CHECK WHY...` lines; `#` starts a comment."""
    requirements = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 2)
        if len(parts) < 2 or parts[1].split(":", 1)[0] not in {"cmd", "lib", "file"}:
            raise ListError(f"{path}:{number}: expected 'PACKAGE cmd:|lib:|file:CHECK WHY'")
        requirements.append(Requirement(parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
    return requirements


def _loader_knows(soname: str) -> bool:
    """Whether the dynamic loader can find `soname` (ldconfig's cache, else the usual dirs)."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        listing = subprocess.run(
            [ldconfig, "-p"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        listing = ""
    if any(line.strip().startswith(soname + " ") for line in listing.splitlines()):
        return True
    patterns = (soname, f"*/{soname}")  # e.g. /usr/lib/x86_64-linux-gnu/libGL.so.1
    return any(any(Path(d).glob(p)) for d in LIB_DIRS for p in patterns if Path(d).is_dir())


def is_present(requirement: Requirement) -> bool:
    kind, _, target = requirement.check.partition(":")
    if kind == "cmd":
        return shutil.which(target) is not None
    if kind == "lib":
        return _loader_knows(target)
    return Path(target).exists()


def install_commands(packages: list[str], *, root: bool, sudo: bool) -> list[list[str]] | None:
    """The apt-get commands to run, with sudo when not root; None when we cannot install."""
    if not packages:
        return []
    if shutil.which("apt-get") is None or not (root or sudo):
        return None
    prefix = [] if root else ["sudo", "-n"]
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    return [
        [*prefix, *env, "apt-get", "update", "-q"],
        [*prefix, *env, "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
    ]


def _sudo_works() -> bool:
    if shutil.which("sudo") is None:
        return False
    return subprocess.run(["sudo", "-n", "true"], capture_output=True, check=False).returncode == 0


def explain(missing: list[Requirement]) -> str:
    lines = ["missing system packages (Debian/Ubuntu names):"]
    lines += [f"  {r.package:<16} {r.check:<26} {r.why}" for r in missing]
    names = " ".join(r.package for r in missing)
    if shutil.which("apt-get") is None:
        lines.append(f"this machine has no apt-get: install the equivalents of: {names}")
    else:
        lines.append(f"install them as root, then re-run: sudo apt-get install -y {names}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", type=Path, action="append", help="package list file (repeatable)")
    parser.add_argument(
        "--tests", action="store_true", help=f"also {TEST_LIST.name} (what `make test` needs)"
    )
    parser.add_argument(
        "--office", action="store_true", help=f"only {OFFICE_LIST.name} (reading Office files)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print, do not install")
    args = parser.parse_args(argv)
    lists = (args.list or [DEFAULT_LIST]) + ([TEST_LIST] if args.tests else [])
    if args.office:
        lists = [OFFICE_LIST]
    try:
        requirements = [r for path in lists for r in read_list(path)]
    except (OSError, ListError) as error:
        print(f"system_deps: {error}", file=sys.stderr)
        return 2
    missing = [r for r in requirements if not is_present(r)]
    if not missing:
        print(f"system packages: all {len(requirements)} present")
        return 0
    root = os.geteuid() == 0
    commands = install_commands(
        [r.package for r in missing], root=root, sudo=not root and _sudo_works()
    )
    if commands is None:
        print(explain(missing), file=sys.stderr)
        return 1
    print("installing system packages: " + " ".join(r.package for r in missing))
    for command in commands:
        print("+ " + " ".join(command))
        if not args.dry_run and subprocess.run(command, check=False).returncode != 0:
            print(explain(missing), file=sys.stderr)
            return 1
    still = [] if args.dry_run else [r for r in missing if not is_present(r)]
    if still:
        print(explain(still), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
