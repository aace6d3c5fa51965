"""kind on this machine: the cluster config, and the three mends a sandbox like the project's machines
needs, each applied only where a probe shows it is needed (none is on a GitHub-hosted runner).

1. `--privileged` containers cannot start (the sandbox's capability bounding set lacks CAP_SYS_RESOURCE):
   kind runs its node through a `docker` wrapper that replaces `--privileged` with every capability but
   that one, unconfined system paths, /dev/kmsg (and /dev/fuse) and a writable /sys/fs/cgroup.
2. cgroup v1: kubelet >= 1.35 refuses it unless `failCgroupV1: false`.
3. The runtime cannot lower oom_score_adj (same missing capability): `restrict_oom_score_adj = true` in the
   node's containerd.

`python -m tests.kube.kind cleanup` deletes the kind clusters the tests make and what they leave behind,
and stops the e2e PostgreSQL servers a killed run left (.ci/test and .ci/main call it when they end).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLUSTER_PREFIX = "fireflow-"  # every cluster the tests and the demo make; `cleanup` deletes these
CGROUP_ROOT = Path("/sys/fs/cgroup")
# What the node's systemd and kubelet create at the top of every host hierarchy when the node sees the host's
# cgroups (mend 1): kind removes none of it. Only ever removed where no systemd runs the host (on such a host
# these names are the host's own), and only when empty.
LEFTOVER_CGROUPS = ("kubelet", "kubelet.slice", "kubepods", "kubepods.slice", "system.slice", "user.slice",
                    "init.scope", "*.mount")  # fmt: skip


@dataclass(frozen=True)
class Mends:
    unprivileged_node: bool
    cgroup_v1: bool
    restrict_oom_score_adj: bool

    @property
    def any(self) -> bool:
        return self.unprivileged_node or self.cgroup_v1 or self.restrict_oom_score_adj

    def describe(self) -> str:
        applied = [
            name
            for name, on in (
                ("docker wrapper instead of --privileged", self.unprivileged_node),
                ("failCgroupV1: false", self.cgroup_v1),
                ("restrict_oom_score_adj", self.restrict_oom_score_adj),
            )
            if on
        ]
        return ", ".join(applied) or "none"


def _starts(image: str, *flags: str) -> bool:
    result = subprocess.run(["docker", "run", "--rm", *flags, "--entrypoint", "true", image],
                            capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    return result.returncode == 0


def detect_mends(probe_image: str) -> Mends:
    """Probe this Docker engine with a local image: which of the three mends it needs."""
    if not _starts(probe_image):
        raise RuntimeError(f"docker cannot start even a plain container of {probe_image}")
    version = subprocess.run(["docker", "info", "--format", "{{.CgroupVersion}}"], capture_output=True, text=True,
                             check=True).stdout.strip()  # fmt: skip
    return Mends(
        unprivileged_node=not _starts(probe_image, "--privileged"),
        cgroup_v1=version == "1",
        restrict_oom_score_adj=not _starts(probe_image, "--cap-add", "SYS_RESOURCE"),
    )


def kind_config(mends: Mends, offline_node: bool) -> dict[str, Any]:
    """The kind cluster config: one node; the offline node image has no kindnetd (its static ptp network
    stands in), and each needed mend as a kubeadm or containerd patch."""
    config: dict[str, Any] = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "nodes": [{"role": "control-plane"}],
    }
    if offline_node:
        config["networking"] = {"disableDefaultCNI": True}
    if mends.cgroup_v1:
        config["kubeadmConfigPatches"] = [
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\n"
        ]
    if mends.restrict_oom_score_adj:
        config["containerdConfigPatches"] = ['[plugins."io.containerd.grpc.v1.cri"]\n  restrict_oom_score_adj = true\n']
    return config


def privileged_replacement(devices: list[str]) -> list[str]:
    """What the docker wrapper passes instead of `--privileged`."""
    flags = ["--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "systempaths=unconfined"]
    for device in devices:
        flags += ["--device", device]
    return [*flags, "-v", f"{CGROUP_ROOT}:{CGROUP_ROOT}:rw"]


def docker_wrapper(real_docker: str, devices: list[str]) -> str:
    """A `docker` for kind: `run`/`create` get `privileged_replacement` for `--privileged`, `exec` drops it;
    everything else passes through unchanged."""
    replacement = " ".join(privileged_replacement(devices))
    return f"""#!/usr/bin/env bash
# Written by tests/kube/kind.py: kind's docker on a machine where --privileged containers cannot start.
sub="${{1:-}}"
case "$sub" in
    run|create|exec) shift ;;
    *) exec {real_docker} "$@" ;;
esac
args=("$sub")
for arg in "$@"; do
    if [[ "$arg" == --privileged ]]; then
        [[ "$sub" == exec ]] || args+=({replacement})
    else
        args+=("$arg")
    fi
done
exec {real_docker} "${{args[@]}}"
"""


def kind_launcher(real_kind: Path, wrapper_dir: Path) -> str:
    return (
        "#!/bin/sh\n# Written by tests/kube/kind.py: kind with the docker wrapper first on PATH.\n"
        f'PATH="{wrapper_dir}:$PATH" exec {real_kind} "$@"\n'
    )


def kind_command(real_kind: Path, mends: Mends, workdir: Path) -> Path:
    """The kind command to run: the real one, or a launcher that puts the docker wrapper first on PATH."""
    if not mends.unprivileged_node:
        return real_kind
    real_docker = shutil.which("docker")
    if real_docker is None:
        raise RuntimeError("no docker command on PATH")
    wrapper_dir = workdir / "docker-wrapper"
    wrapper_dir.mkdir(parents=True, exist_ok=True)
    devices = [d for d in ("/dev/kmsg", "/dev/fuse") if Path(d).exists()]
    wrapper = wrapper_dir / "docker"
    wrapper.write_text(docker_wrapper(real_docker, devices))
    wrapper.chmod(0o755)
    launcher = workdir / "kind"
    launcher.write_text(kind_launcher(real_kind, wrapper_dir))
    launcher.chmod(0o755)
    return launcher


def gateway(network: str = "kind") -> tuple[str, str]:
    """The host's IPv4 address on kind's Docker network and the network's subnet: where pods reach a server
    of the test process (kind's nodes masquerade pod traffic to it)."""
    out = subprocess.run(
        ["docker", "network", "inspect", network, "--format",
         "{{range .IPAM.Config}}{{.Subnet}} {{.Gateway}}\n{{end}}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for line in out.splitlines():
        subnet, _, address = line.strip().partition(" ")
        if ":" not in subnet and address:
            return address, subnet
    raise RuntimeError(f"docker network {network} has no IPv4 gateway: {out!r}")


def host_runs_systemd() -> bool:
    return Path("/proc/1/comm").read_text().strip() == "systemd"


def leftover_cgroups(root: Path = CGROUP_ROOT, systemd_host: bool | None = None) -> list[Path]:
    """The cgroup trees a mended kind node left at the top of the host's hierarchies (deepest first); none
    where systemd runs the host."""
    if systemd_host is None:
        systemd_host = host_runs_systemd()
    if systemd_host or not root.is_dir():
        return []
    found: list[Path] = []
    for hierarchy in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        for pattern in LEFTOVER_CGROUPS:
            for top in sorted(hierarchy.glob(pattern)):
                if top.is_dir():
                    found += sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: len(p.parts), reverse=True)
    return found


def remove_leftover_cgroups(root: Path = CGROUP_ROOT, systemd_host: bool | None = None) -> list[Path]:
    """rmdir every empty leftover cgroup (one with processes refuses and stays); returns the removed."""
    removed = []
    for path in leftover_cgroups(root, systemd_host):
        with contextlib.suppress(OSError):
            path.rmdir()
            removed.append(path)
    return removed


def kind_nodes_running() -> bool:
    result = subprocess.run(["docker", "ps", "-q", "--filter", "label=io.x-k8s.kind.cluster"],
                            capture_output=True, text=True, check=False)  # fmt: skip
    return result.returncode == 0 and bool(result.stdout.strip())


def cleanup(kind: Path, names: list[str] | None = None) -> list[str]:
    """Delete the kind clusters `names` (default: every one named fireflow-*), then the cgroups they left
    (once no kind node runs any more)."""
    listed = subprocess.run([str(kind), "get", "clusters"], capture_output=True, text=True, check=False)
    deleted = []
    for name in listed.stdout.split():
        wanted = (name in names) if names else name.startswith(CLUSTER_PREFIX)
        if wanted:
            subprocess.run([str(kind), "delete", "cluster", "--name", name], capture_output=True, check=False)
            deleted.append(name)
    if not kind_nodes_running():
        remove_leftover_cgroups()
    return deleted


def orphaned_postgres(proc: Path = Path("/proc")) -> list[tuple[int, Path, Path]]:
    """PostgreSQL servers of tests/e2e/databases.py (the e2e tiers and the demo) whose owner is gone (a killed
    run; a clean end or Ctrl-C stops them): (pid, its base dir, its pg_hba dir)."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        args = [a.decode(errors="replace") for a in argv]
        hba = next((a.split("=", 1)[1] for a in args if a.startswith("hba_file=")), "")
        if ppid != 1 or not args[0].endswith("/postgres") or "/fireflow-e2e-pg-conf-" not in hba or "-D" not in args:
            continue
        data = Path(args[args.index("-D") + 1])
        found.append((int(entry.name), data.parent, Path(hba).parent))
    return found


def stop_orphaned_postgres() -> list[int]:
    stopped = []
    for pid, base_dir, conf_dir in orphaned_postgres():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)  # fast shutdown
            for _ in range(100):
                if not Path(f"/proc/{pid}").exists():
                    break
                time.sleep(0.1)
            stopped.append(pid)
        for directory in (base_dir, conf_dir):
            if directory.name.startswith(("fireflow-pg-", "fireflow-e2e-pg-conf-")):
                shutil.rmtree(directory, ignore_errors=True)
    return stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kube.kind")
    parser.add_argument("command", choices=["cleanup"])
    parser.add_argument("--kind", type=Path, help="the kind CLI (default: the pinned one in the tools cache)")
    parser.add_argument("--name", action="append", help="a cluster to delete (default: every fireflow-* cluster)")
    args = parser.parse_args(argv)
    from .tools import pins, tools_dir  # noqa: PLC0415 - the CLI only

    kind = args.kind or tools_dir() / f"kind-{pins()['KIND_VERSION']}" / "bin" / "kind"
    for pid in stop_orphaned_postgres():
        print(f"stopped PostgreSQL {pid}, left by a killed run", file=sys.stderr)
    docker_up = subprocess.run(["docker", "version"], capture_output=True, check=False).returncode == 0
    if not (kind.exists() and docker_up):
        return 0  # nothing can be running
    for name in cleanup(kind, args.name):
        print(f"deleted kind cluster {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
