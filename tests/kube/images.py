"""The one table that says what a container image means on the process node.

An image is matched by its repository basename: registry, path and tag are ignored, so
`ghcr.io/acme/fireflow-worker:1.2` and `fireflow-worker:dev` are both `fireflow-worker`.

| basename            | entrypoint (ENTRYPOINT)          | port variable                   |
|---------------------|----------------------------------|---------------------------------|
| `fireflow-worker`   | `<venv>/bin/fireflow-worker`     | `FIREFLOW_HEALTH_PORT`          |
| `fireflow-operator` | `<venv>/bin/fireflow-operator`   | `FIREFLOW_OPERATOR_METRICS_PORT`|
| `python`            | none (CMD is `python3`)          | `PORT` (and `HOST`=127.0.0.1)   |
| `fireflow-worker-crashing` | `crashing-worker.sh`: migrates, its worker exits at start | `FIREFLOW_HEALTH_PORT` |

Every pod shares 127.0.0.1, so the node gives each declared `containerPort` its own free host port and
tells the process the host port of the container's *first* declared port through the image's port
variable (overriding any value the Pod spec sets: the spec's value is only right on a pod network).
A probe's port that no `containerPort` declares (the operator's liveness port, probed by number) gets a free
host port too when the image names a probe port variable (the operator's `FIREFLOW_OPERATOR_HEALTH_PORT`);
otherwise it is probed as it is.
Likewise the bind-address variables in `loopback_env` override the spec, so nothing listens beyond
127.0.0.1.
A `command[0]` naming one of the image's executables (by basename, e.g. `python3` or
`/usr/local/bin/fireflow-worker`) runs the local one. Any other image is an ErrImagePull on the Pod.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from .tools import venv_bin

CRASHING_WORKER = str(Path(__file__).with_name("crashing-worker.sh"))
TEST_IMAGE = "python:3.13-slim"  # the tests' tiny-server image: real in kind, sys.executable locally


@dataclass(frozen=True)
class LocalImage:
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    port_env: str
    executables: dict[str, str]
    # What the Dockerfile's ENV would set: the Pod spec may override these.
    env: dict[str, str] = field(default_factory=dict)
    # Set after the Pod spec's env: every listener must stay on 127.0.0.1 whatever the spec says.
    loopback_env: dict[str, str] = field(default_factory=dict)
    # The variable through which the image's program takes its termination-message path (a real node
    # mounts /dev/termination-log instead); also set to the per-container file.
    termination_env: str | None = None
    # The variable through which the program takes the port its probes use when no containerPort declares it:
    # two replicas of one Deployment on this node would bind the same number otherwise.
    probe_port_env: str | None = None


class UnknownImageError(LookupError):
    pass


def _venv_tool(name: str) -> str:
    return str(venv_bin() / name)


def _table() -> dict[str, LocalImage]:
    python = {"python": sys.executable, "python3": sys.executable}
    unbuffered = {"PYTHONUNBUFFERED": "1"}
    return {
        "fireflow-worker": LocalImage(
            entrypoint=(_venv_tool("fireflow-worker"),),
            cmd=(),
            port_env="FIREFLOW_HEALTH_PORT",
            executables={
                "fireflow-worker": _venv_tool("fireflow-worker"),
                "fireflow": _venv_tool("fireflow"),
                **python,
            },
            env=unbuffered,
            loopback_env={"FIREFLOW_HEALTH_HOST": "127.0.0.1"},
            termination_env="FIREFLOW_TERMINATION_LOG",
        ),
        # A worker image with a fatal bug: migrations work, every worker exits at start (rollback tests).
        "fireflow-worker-crashing": LocalImage(
            entrypoint=(CRASHING_WORKER,),
            cmd=(),
            port_env="FIREFLOW_HEALTH_PORT",
            executables={"fireflow-worker": CRASHING_WORKER, **python},
            env={**unbuffered, "FIREFLOW_REAL_WORKER": _venv_tool("fireflow-worker")},
            loopback_env={"FIREFLOW_HEALTH_HOST": "127.0.0.1"},
            termination_env="FIREFLOW_TERMINATION_LOG",
        ),
        "fireflow-operator": LocalImage(
            entrypoint=(_venv_tool("fireflow-operator"),),
            cmd=(),
            port_env="FIREFLOW_OPERATOR_METRICS_PORT",
            executables={"fireflow-operator": _venv_tool("fireflow-operator"), "kopf": _venv_tool("kopf"), **python},
            env=unbuffered,
            loopback_env={"FIREFLOW_OPERATOR_METRICS_HOST": "127.0.0.1", "FIREFLOW_OPERATOR_HEALTH_HOST": "127.0.0.1"},
            probe_port_env="FIREFLOW_OPERATOR_HEALTH_PORT",
        ),
        "python": LocalImage(
            entrypoint=(),
            cmd=("python3",),
            port_env="PORT",
            executables=python,
            env=unbuffered,
            loopback_env={"HOST": "127.0.0.1"},
        ),
    }


def basename(image: str) -> str:
    """`registry:5000/a/b/name:tag@sha256:...` -> `name`."""
    without_digest = image.split("@", 1)[0]
    last = without_digest.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def lookup(image: str) -> LocalImage:
    try:
        return _table()[basename(image)]
    except KeyError:
        known = ", ".join(sorted(_table()))
        raise UnknownImageError(
            f'image "{image}" has no local command (known: {known}; see tests/kube/images.py)'
        ) from None


def argv(image: LocalImage, command: list[str], args: list[str]) -> list[str]:
    """The process argv, with Kubernetes' rules: `command` replaces ENTRYPOINT, `args` replaces CMD."""
    full = [*command, *args] if command else [*image.entrypoint, *(args or image.cmd)]
    if not full:
        raise ValueError("the container has neither a command nor an image entrypoint")
    head = full[0]
    local = image.executables.get(Path(head).name)
    if local is None:
        raise FileNotFoundError(f'exec: "{head}": executable file not found in the image\'s local table')
    return [local, *full[1:]]
