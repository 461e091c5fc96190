"""The library's version, read from the installed distribution: pyproject.toml is its one source."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vrag-compress")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"


def version_line() -> str:
    """What `vrag --version` prints."""
    return f"vrag {__version__}"
