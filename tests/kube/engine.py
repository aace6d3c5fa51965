"""The Docker side of the kind mode and of the image tests: the engine, the project's images and the kind
node image, each made by a script next to this file (cached by version; a no-op when nothing changed).

The scripts print progress on stderr (left to the caller's terminal or pytest's capture) and their results
as KEY=VALUE lines on stdout.
"""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .tools import HERE, REPO_ROOT, pins, tools_dir

HELD_ENV = "FIREFLOW_DOCKER_HELD"  # set by .ci/test and .ci/main: they start and stop the engine themselves
BASES = ("debian", "official")


class ScriptError(RuntimeError):
    """A build script failed; its own output (above, or in pytest's captured stderr) says why."""


def run_script(script: str, *args: str) -> dict[str, str]:
    """Run `tests/kube/<script>`; returns the KEY=VALUE lines it printed on stdout."""
    path = HERE / script
    # The engine's lifetime is this process's (ENGINE): the script must not stop it when it ends.
    env = {**os.environ, HELD_ENV: "1"}
    result = subprocess.run(["bash", str(path), *args], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, check=False,
                            env=env)  # fmt: skip
    if result.returncode != 0:
        raise ScriptError(f"{path.relative_to(REPO_ROOT)} {' '.join(args)} failed with exit status {result.returncode}")
    found: dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isupper():
            found[key] = value
    return found


class Engine:
    """A running Docker engine for as long as anyone in this process needs it. One started here
    (docker-engine.sh keeps ownership in a pid file) stops at the last `down`; anyone else's is left alone."""

    def __init__(self) -> None:
        self.owned = False
        self.users = 0

    def up(self) -> Engine:
        if self.users == 0:
            state = subprocess.run(["bash", str(HERE / "docker-engine.sh"), "up"], capture_output=True, text=True,
                                   check=False)  # fmt: skip
            if state.returncode != 0:
                last = state.stderr.strip().splitlines()[-1:] or [f"exit status {state.returncode}"]
                raise ScriptError(f"no Docker engine: {last[0]}")
            self.owned = state.stdout.strip() == "started" and not os.environ.get(HELD_ENV)
        self.users += 1
        return self

    def down(self) -> None:
        if self.users == 0:
            return
        self.users -= 1
        if self.users == 0 and self.owned:
            subprocess.run(["bash", str(HERE / "docker-engine.sh"), "down"], check=False)
            self.owned = False


ENGINE = Engine()  # one per process: the kind cluster and the image tests share it


@dataclass(frozen=True)
class ProjectImages:
    python: str  # the PYTHON_IMAGE both were built on (also the tests' small-server image on kind)
    worker: str
    operator: str
    # The e2e's test images (`test_images`): the worker on an older dbos (a real migration to upgrade across)
    # and a worker that crashes at start (a bad rollout).
    older_dbos_worker: str | None = None
    crashing_worker: str | None = None


@functools.cache  # once per process: a second build would only confirm Docker's layer cache
def build_project_images(base: str = "debian", test_images: bool = False) -> ProjectImages:
    """Dockerfile.worker and Dockerfile.operator built on the Debian base made here, or on the Dockerfiles'
    pinned official base (`official`, where a registry is reachable); with `test_images`, the e2e's too."""
    if base not in BASES:
        raise ValueError(f"image base is one of {BASES}, not {base!r}")
    found = run_script("build-images.sh", "--base", base, *(["--test-images"] if test_images else []))
    return ProjectImages(
        python=found["PYTHON_IMAGE"],
        worker=found["WORKER_IMAGE"],
        operator=found["OPERATOR_IMAGE"],
        older_dbos_worker=found.get("OLDER_DBOS_WORKER_IMAGE"),
        crashing_worker=found.get("CRASHING_WORKER_IMAGE"),
    )


@dataclass(frozen=True)
class KindNode:
    image: str
    kind: Path


def build_kind_node() -> KindNode:
    """The offline kind node image (and the kind CLI built with it)."""
    found = run_script("build-kind-node.sh")
    return KindNode(image=found["NODE_IMAGE"], kind=Path(found["KIND"]))


def kind_cli() -> Path:
    """The pinned kind CLI, built through the Go proxy when missing."""
    run_script("build-kind-node.sh", "binaries", "kind")
    return tools_dir() / f"kind-{pins()['KIND_VERSION']}" / "bin" / "kind"


def docker(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


def image_id(reference: str) -> str:
    """The image's id (`sha256:` + the digest of its config), which containerd reports for it too."""
    return docker("image", "inspect", "--format", "{{.Id}}", reference).stdout.strip()
