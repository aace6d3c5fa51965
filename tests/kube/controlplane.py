"""etcd + kube-apiserver + kube-controller-manager on 127.0.0.1, with real TLS and RBAC.

    with ControlPlane() as cp:
        ...  # cp.kubeconfig is an admin (system:masters) kubeconfig

`cp.operator_kubeconfig` has the same rights under a user of its own (`OPERATOR_USER`), so that the audit log
(opt-in: `ControlPlane(audit=True)`, then `cp.audit`) tells the operator's requests from the tests' own: both
use the kubernetes client, whose userAgent is the same.

Everything lives in one temporary directory (certificates, etcd data, logs) that `stop()` removes
after every process group has exited. No scheduler runs: the process node binds pods itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from .audit import AuditLog, apiserver_flags, write_policy
from .kubeconfig import write_kubeconfig
from .netutil import LOOPBACK, free_port, http_ok, wait_until
from .pki import CertificateAuthority, KeyPair, service_account_keys
from .tools import Binaries

SERVICE_CIDR = "10.96.0.0/24"  # bookkeeping only: nothing routes ClusterIPs here
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
OPERATOR_USER = "fireflow-operator-under-test"


class Component:
    """A child process in its own process group, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.log_path.parent)}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
            )  # fmt: skip

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.process.returncode} while starting; last output:\n{self.tail()}"
            )
        return True

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        _reap_group(self.process.pid)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def _reap_group(pgid: int) -> None:
    """SIGKILL whatever a component may have left in its process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class ControlPlane:
    def __init__(self, binaries: Binaries | None = None, workdir: Path | None = None, *, audit: bool = False) -> None:
        self.binaries = binaries or Binaries.locate()
        self._owns_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="fireflow-controlplane-"))
        self.pki_dir = self.workdir / "pki"
        self.components: list[Component] = []
        self.etcd_port = free_port()
        self.apiserver_port = free_port()
        self.server = f"https://{LOOPBACK}:{self.apiserver_port}"
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.operator_kubeconfig = self.workdir / "operator.kubeconfig"
        self.audit = AuditLog(self.workdir / "audit.log") if audit else None
        self.ca_file = self.pki_dir / "ca.crt"
        self.admin_cert: KeyPair | None = None

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self, timeout: float = 120.0) -> None:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority(self.pki_dir)
        sa_keys = service_account_keys(self.pki_dir)
        serving = ca.issue(
            "apiserver",
            "kube-apiserver",
            server_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            server_ips=(LOOPBACK,),
        )
        admin = ca.issue("admin", "fireflow-admin", organizations=("system:masters",))
        operator = ca.issue("operator", OPERATOR_USER, organizations=("system:masters",))
        write_kubeconfig(
            self.operator_kubeconfig, self.server, ca.pair.cert,
            user="operator", cert_file=operator.cert, key_file=operator.key,
        )  # fmt: skip
        kcm_cert = ca.issue("controller-manager", "system:kube-controller-manager")
        self.admin_cert = admin
        write_kubeconfig(
            self.kubeconfig, self.server, ca.pair.cert, user="admin", cert_file=admin.cert, key_file=admin.key
        )
        kcm_kubeconfig = write_kubeconfig(
            self.workdir / "controller-manager.kubeconfig", self.server, ca.pair.cert,
            user="system:kube-controller-manager", cert_file=kcm_cert.cert, key_file=kcm_cert.key,
        )  # fmt: skip

        etcd = self._component("etcd", self._etcd_args())
        wait_until(
            lambda: etcd.check_alive() and http_ok(f"http://{LOOPBACK}:{self.etcd_port}/health"),
            timeout, "etcd to become healthy",
        )  # fmt: skip

        apiserver = self._component(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://{LOOPBACK}:{self.etcd_port}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={self.apiserver_port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.pair.cert}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={sa_keys.cert}",
                f"--service-account-signing-key-file={sa_keys.key}",
                # The endpoints of the `kubernetes` Service may not be a loopback address; nothing
                # in the tests reaches the API server through that Service.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
                *self._audit_flags(),
            ],
        )
        admin_tls = self.admin_ssl_context()
        wait_until(
            lambda: apiserver.check_alive() and http_ok(f"{self.server}/readyz", admin_tls),
            timeout, "kube-apiserver /readyz",
        )  # fmt: skip

        kcm_port = free_port()
        kcm = self._component(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={kcm_port}",
                f"--cert-dir={self.workdir / 'controller-manager-certs'}",
                "--leader-elect=false",
                "--controllers=*",
                # Each controller acts as its own service account, so RBAC is exercised as in a cluster.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa_keys.key}",
                f"--root-ca-file={ca.pair.cert}",
                f"--cluster-signing-cert-file={ca.pair.cert}",
                f"--cluster-signing-key-file={ca.pair.key}",
                "--cluster-name=fireflow-test",
                "--profiling=false",
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its serving cert is self-signed in memory
        wait_until(
            lambda: kcm.check_alive() and http_ok(f"https://{LOOPBACK}:{kcm_port}/healthz", insecure),
            timeout, "kube-controller-manager /healthz",
        )  # fmt: skip

    def _audit_flags(self) -> list[str]:
        if self.audit is None:
            return []
        return apiserver_flags(write_policy(self.workdir / "audit-policy.yaml"), self.audit.path)

    def _etcd_args(self) -> list[str]:
        client = f"http://{LOOPBACK}:{self.etcd_port}"
        peer = f"http://{LOOPBACK}:{free_port()}"
        return [
            str(self.binaries.etcd),
            "--name=fireflow",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=fireflow={peer}",
            "--unsafe-no-fsync",  # test data: durability buys nothing, fsync costs seconds
            "--log-level=warn",
        ]

    def _component(self, name: str, argv: list[str]) -> Component:
        component = Component(name, argv, self.workdir / f"{name}.log")
        self.components.append(component)
        component.start()
        return component

    def admin_ssl_context(self) -> ssl.SSLContext:
        assert self.admin_cert is not None, "the control plane is not started"
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.admin_cert.cert), str(self.admin_cert.key))
        return context

    def logs(self, lines: int = 40) -> str:
        return "\n".join(f"--- {c.name} ---\n{c.tail(lines)}" for c in self.components)

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()
        self.components.clear()
        if self._owns_workdir and self.workdir.exists():
            # etcd may still be closing files for a moment after exiting.
            for _ in range(20):
                shutil.rmtree(self.workdir, ignore_errors=True)
                if not self.workdir.exists():
                    break
                time.sleep(0.1)
