"""The archive Krew downloads for `kubectl fireflow`, built reproducibly from charts/kubectl-fireflow/, so that
the manifest's sha256 can be checked against the repository (a release uploads this same archive).

    python -m tests.support.krew OUT.zip     writes it and prints its sha256
"""

from __future__ import annotations

import hashlib
import io
import sys
import zipfile
from pathlib import Path

from tests.kube.tools import REPO_ROOT

PLUGIN_DIR = REPO_ROOT / "charts" / "kubectl-fireflow"
MANIFEST = PLUGIN_DIR / "fireflow.yaml"
SHIM = PLUGIN_DIR / "kubectl-fireflow"


def archive_bytes() -> bytes:
    """A zip of the shim alone, stored uncompressed with a fixed date and mode: the same bytes on every machine
    (no compressor version in the way)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, mode="w", compression=zipfile.ZIP_STORED) as archive:
        info = zipfile.ZipInfo(SHIM.name, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o100755 << 16  # a regular file, executable: Krew links it as the plugin
        info.create_system = 3  # Unix, so that the mode is read
        archive.writestr(info, SHIM.read_bytes())
    return out.getvalue()


def archive_sha256() -> str:
    return hashlib.sha256(archive_bytes()).hexdigest()


if __name__ == "__main__":
    Path(sys.argv[1]).write_bytes(archive_bytes())
    print(archive_sha256())
