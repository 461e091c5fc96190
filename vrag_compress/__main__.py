"""`python -m vrag_compress` and the `vrag` script. `vrag --version` answers here, before the
command modules (and numpy) load; everything else goes to the Typer app in `vrag_compress.cli`."""

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from vrag_compress.version import version_line

        print(version_line())
        return
    from vrag_compress.cli import main as run_cli

    run_cli()


if __name__ == "__main__":
    main()
