"""Kubeconfig files for the admin, the control-plane components and service-account pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_kubeconfig(
    path: Path,
    server: str,
    ca_file: Path,
    *,
    user: str,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    credentials: dict[str, str] = {}
    if cert_file is not None and key_file is not None:
        credentials = {"client-certificate": str(cert_file), "client-key": str(key_file)}
    if token is not None:
        credentials["token"] = token
    context: dict[str, Any] = {"cluster": "fireflow-test", "user": user}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fireflow-test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "fireflow-test", "context": context}],
        "current-context": "fireflow-test",
    }
    # Opened 0600 from the start: the file may hold a bearer token.
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
