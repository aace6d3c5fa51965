"""The project's version, as every command's `--version` prints it: the installed distribution's metadata."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "fireflow-pool"


def project_version() -> str:
    """The version pip installed (pyproject.toml's `version`); `unknown` when run from a tree not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def version_line(program: str) -> str:
    return f"{program} {project_version()}"
