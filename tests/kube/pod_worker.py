"""The life of one Pod on the process node: start, supervise, probe, report, terminate, finalize.

One thread per Pod ticks every 100 ms: it (re)starts containers when due, polls processes, runs the
probes that are due, and patches the Pod status when it changed. Deletion runs the kubelet's sequence:
SIGTERM, the grace period, SIGKILL, a terminal status, then delete with grace 0 (finalize).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from . import images, podenv, rawapi
from .container import ContainerRun, rfc3339
from .kubeconfig import write_kubeconfig
from .netutil import LOOPBACK, free_port
from .probes import Prober
from .tools import venv_bin

Json = dict[str, Any]
log = logging.getLogger("fireflow.process_node")

TICK = 0.1
IDLE_TICK = 1.0  # a Pod whose containers are all done only waits for its deletion
MIN_KILL_GRACE = 2.0  # the kubelet never kills with less than 2 s, even for grace 0
CONFIG_RETRY = 2.0  # a missing Secret/ConfigMap may appear later: retry the start
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
TERMINATION_MESSAGE_ENV = "FIREFLOW_TERMINATION_MESSAGE_PATH"


class Node(Protocol):
    core: CoreV1Api
    name: str
    pods_dir: Path
    server: str
    ca_file: Path
    backoff: tuple[float, float]
    sources: podenv.Sources

    def request_token(self, namespace: str, service_account: str, pod: Json, source: Json) -> str: ...
    def record_event(self, pod: Json, kind: str, reason: str, message: str) -> None: ...
    def worker_finished(self, worker: PodWorker) -> None: ...


@dataclass
class Slot:
    """One container of the Pod across its restarts."""

    spec: Json
    init: bool
    image: images.LocalImage | None = None
    image_error: str = ""
    run: ContainerRun | None = None
    runs: int = 0
    restart_count: int = 0
    state: Json = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Json = field(default_factory=dict)
    last_pid: int = 0
    ready: bool = False
    started: bool = False
    probes: dict[str, Prober] = field(default_factory=dict)
    next_start: float = 0.0
    backoff: float = 0.0
    finished: bool = False  # will not run again
    succeeded: bool = False  # an init container that completed

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> Json:
        local = " ".join(self.image.entrypoint) if self.image else ""
        status: Json = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": f"process://{local}" if local else "",
            "ready": self.ready,
            "started": self.started and self.run is not None,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.last_pid:
            status["containerID"] = f"process://{self.last_pid}"
        return status


class PodWorker(threading.Thread):
    def __init__(self, node: Node, pod: Json) -> None:
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        super().__init__(name=f"pod-{self.namespace}/{self.pod_name}", daemon=True)
        self.node = node
        self.dir = node.pods_dir / f"{self.namespace}_{self.pod_name}_{self.uid}"
        self._pod = pod
        self._wake = threading.Event()
        self._gone = False  # the Pod object no longer exists (force-deleted)
        self._shutdown: float | None = None  # the node is stopping: kill with at most this grace
        spec = pod["spec"]
        self.policy: str = spec.get("restartPolicy", "Always")
        self.init_slots = [Slot(c, init=True) for c in spec.get("initContainers", [])]
        self.slots = [Slot(c, init=False) for c in spec.get("containers", [])]
        if self.init_slots:
            for slot in self.slots:
                slot.state = {"waiting": {"reason": "PodInitializing"}}
        self.ports: dict[str | int, int] = {}
        self.first_port: dict[str, int] = {}
        self.probe_port: dict[str, int] = {}  # container -> host port of its undeclared probe port
        self.start_time = rfc3339()
        self._transitions: dict[str, tuple[str, str]] = {}
        self._reported: Json | None = None
        self._report_after = 0.0
        self._kubeconfig: Path | None = None
        self._terminal_on_delete = False

    # -- called by the node's watch thread --------------------------------------------------------------

    def update(self, pod: Json) -> None:
        self._pod = pod
        self._wake.set()

    def gone(self) -> None:
        self._gone = True
        self._wake.set()

    def shutdown(self, grace: float) -> None:
        self._shutdown = grace
        self._wake.set()

    # -- the thread ---------------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._prepare()
            while True:
                if self._shutdown is not None or self._gone:
                    cap = self._shutdown if self._shutdown is not None else MIN_KILL_GRACE
                    self._stop_all(min(cap, self._pod_grace()), interruptible=False)
                    return
                if self._pod["metadata"].get("deletionTimestamp"):
                    self._terminate_and_finalize()
                    return
                self._step(time.monotonic())
                self._report()
                self._wake.wait(IDLE_TICK if self._all_done() else TICK)
                self._wake.clear()
        except Exception:
            log.exception("pod %s/%s: worker failed", self.namespace, self.pod_name)
            self._stop_all(0, interruptible=False)
        finally:
            self.node.worker_finished(self)

    def _prepare(self) -> None:
        (self.dir / "home").mkdir(parents=True, exist_ok=True)
        (self.dir / "tmp").mkdir(exist_ok=True)
        for slot in (*self.init_slots, *self.slots):
            try:
                slot.image = images.lookup(slot.spec.get("image", ""))
            except images.UnknownImageError as error:
                slot.image_error = str(error)
            for port in slot.spec.get("ports", []):
                host_port = free_port()
                self.ports[int(port["containerPort"])] = host_port
                if port.get("name"):
                    self.ports[str(port["name"])] = host_port
                self.first_port.setdefault(slot.name, host_port)
            if slot.image is not None and slot.image.probe_port_env:
                self._map_probe_port(slot)

    def _map_probe_port(self, slot: Slot) -> None:
        """The container's probe port by number (the first probe's), on a host port of its own."""
        for kind in ("startup", "liveness", "readiness"):
            handler = slot.spec.get(f"{kind}Probe") or {}
            port = (handler.get("httpGet") or handler.get("tcpSocket") or {}).get("port")
            if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
                if int(port) not in self.ports:
                    self.ports[int(port)] = free_port()
                self.probe_port[slot.name] = self.ports[int(port)]
                return

    def _pod_grace(self) -> float:
        meta, spec = self._pod["metadata"], self._pod["spec"]
        grace = meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30))
        return max(float(grace if grace is not None else 30), MIN_KILL_GRACE)

    # -- running containers -------------------------------------------------------------------------------

    def _step(self, now: float) -> None:
        for slot in self.init_slots:
            if not slot.succeeded:
                self._tick(slot, now)
                if not slot.succeeded:
                    return  # init containers run one at a time, before everything else
        for slot in self.slots:
            self._tick(slot, now)

    def _tick(self, slot: Slot, now: float) -> None:
        if slot.run is not None:
            self._supervise(slot, slot.run, now)
        if slot.run is None and not slot.finished and now >= slot.next_start:
            self._start(slot, now)

    def _start(self, slot: Slot, now: float) -> None:
        if slot.image is None:
            slot.state = {"waiting": {"reason": "ErrImagePull", "message": slot.image_error}}
            slot.next_start = float("inf")  # the table does not change while the node runs
            self._event("Warning", "Failed", f"Failed to pull image: {slot.image_error}")
            return
        try:
            env = self._environment(slot, slot.image)
            argv = images.argv(
                slot.image,
                podenv.expand_all(slot.spec.get("command", []), env),
                podenv.expand_all(slot.spec.get("args", []), env),
            )
        except podenv.EnvConfigError as error:
            if slot.state.get("waiting", {}).get("message") != str(error):
                self._event("Warning", "Failed", f"Error: {error}")
            slot.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(error)}}
            slot.next_start = now + CONFIG_RETRY
            return
        except (OSError, ValueError) as error:
            # What a runtime reports when the entrypoint cannot be executed.
            slot.last_state = self._previous(slot)
            slot.state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": str(error),
                                         "startedAt": rfc3339(), "finishedAt": rfc3339()}}  # fmt: skip
            slot.restart_count += 1 if slot.runs else 0
            slot.runs += 1
            self._event("Warning", "Failed", f"Error: {error}")
            self._after_exit(slot, 128, 0.0, now)
            return
        slot.last_state = self._previous(slot)
        if slot.runs:
            slot.restart_count += 1
        log_path = self.dir / f"{slot.name}.{slot.runs}.log"
        slot.runs += 1
        slot.run = ContainerRun.start(argv, env, self.dir / "home", log_path, Path(env[TERMINATION_MESSAGE_ENV]))
        slot.last_pid = slot.run.pid
        slot.state = {"running": {"startedAt": slot.run.started_at}}
        slot.probes = {
            kind: Prober(slot.spec[f"{kind}Probe"], self.ports, env, now)
            for kind in ("startup", "liveness", "readiness")
            if slot.spec.get(f"{kind}Probe")
        }
        slot.started = "startup" not in slot.probes
        slot.ready = slot.started and "readiness" not in slot.probes and not slot.init
        log.info("pod %s/%s: started container %s (pid %d)", self.namespace, self.pod_name, slot.name, slot.run.pid)
        self._event("Normal", "Started", f"Started container {slot.name}")

    @staticmethod
    def _previous(slot: Slot) -> Json:
        if "terminated" in slot.state:
            return dict(slot.state)
        return slot.last_state

    def _supervise(self, slot: Slot, run: ContainerRun, now: float) -> None:
        if run.poll() is None:
            run.enforce_deadline()
            if run.kill_deadline is None:
                self._probe(slot, run, now)
            return
        slot.run = None
        slot.ready = False
        slot.state = {"terminated": run.terminated_state(slot.spec.get("terminationMessagePolicy", "File"))}
        log.info("pod %s/%s: container %s exited with %d", self.namespace, self.pod_name, slot.name, run.exit_code)
        self._after_exit(slot, run.exit_code, now - run.started_monotonic, now)

    def _after_exit(self, slot: Slot, exit_code: int, ran_for: float, now: float) -> None:
        if slot.init and exit_code == 0:
            slot.succeeded = slot.finished = True
            return
        if slot.init:
            restart = self.policy != "Never"
        else:
            restart = self.policy == "Always" or (self.policy == "OnFailure" and exit_code != 0)
        if not restart:
            slot.finished = True
            return
        base, cap = self.node.backoff
        if ran_for > 2 * cap:
            slot.backoff = 0.0  # a container that ran long enough starts its back-off afresh
        delay = slot.backoff
        slot.backoff = min(max(base, 2 * slot.backoff), cap)
        slot.next_start = now + delay
        if delay > 0:
            slot.last_state = dict(slot.state)
            message = (
                f"back-off {delay:g}s restarting failed container={slot.name} "
                f"pod={self.pod_name}_{self.namespace}({self.uid})"
            )
            slot.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
            self._event("Warning", "BackOff", f"Back-off restarting failed container {slot.name}")

    def _probe(self, slot: Slot, run: ContainerRun, now: float) -> None:
        for kind in ("startup", "liveness", "readiness"):
            prober = slot.probes.get(kind)
            if prober is None or not prober.due(now) or (kind == "startup") == slot.started:
                continue
            prober.run(now)
            if kind == "startup" and prober.result:
                slot.started = True
                slot.ready = "readiness" not in slot.probes
            elif kind in ("startup", "liveness") and prober.result is False:
                log.info("pod %s/%s: container %s failed its %s probe (%s), killing it",
                         self.namespace, self.pod_name, slot.name, kind, prober.last_error)  # fmt: skip
                self._event("Warning", "Unhealthy", f"{kind.capitalize()} probe failed: {prober.last_error}")
                self._event("Normal", "Killing", f"Container {slot.name} failed {kind} probe, will be restarted")
                run.terminate(float(prober.spec.get("terminationGracePeriodSeconds", self._pod_grace())))
                return
            elif kind == "readiness":
                if slot.ready and prober.result is False:
                    self._event("Warning", "Unhealthy", f"Readiness probe failed: {prober.last_error}")
                slot.ready = prober.result is True

    def _environment(self, slot: Slot, image: images.LocalImage) -> dict[str, str]:
        spec_env = podenv.resolve(self._pod, slot.spec, self.node.sources)
        base = {
            "PATH": f"{venv_bin()}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.dir / "home"),
            "TMPDIR": str(self.dir / "tmp"),
            "HOSTNAME": self._pod["spec"].get("hostname") or self.pod_name,
            "LANG": "C.UTF-8",
        }
        env = {**base, **image.env, **spec_env, **image.loopback_env}
        if slot.name in self.first_port:
            env[image.port_env] = str(self.first_port[slot.name])
        if image.probe_port_env and slot.name in self.probe_port:
            env[image.probe_port_env] = str(self.probe_port[slot.name])
        env[TERMINATION_MESSAGE_ENV] = str(self.dir / f"{slot.name}.termination-log")
        if image.termination_env:
            env[image.termination_env] = env[TERMINATION_MESSAGE_ENV]
        kubeconfig = self._credentials()
        if kubeconfig is not None and "KUBECONFIG" not in spec_env:
            env["KUBECONFIG"] = str(kubeconfig)
        return env

    def _credentials(self) -> Path | None:
        """A kubeconfig with a TokenRequest token, when admission mounted the service-account token."""
        if self._kubeconfig is not None:
            return self._kubeconfig
        spec = self._pod["spec"]
        for volume in spec.get("volumes", []):
            for source in volume.get("projected", {}).get("sources", []):
                if "serviceAccountToken" in source:
                    account = spec.get("serviceAccountName") or "default"
                    try:
                        token = self.node.request_token(
                            self.namespace, account, self._pod, source["serviceAccountToken"]
                        )
                    except ApiException as error:
                        raise podenv.EnvConfigError(f"cannot request a token for {account}: {error.reason}") from None
                    self._kubeconfig = write_kubeconfig(
                        self.dir / "kubeconfig", self.node.server, self.node.ca_file,
                        user=f"system:serviceaccount:{self.namespace}:{account}", token=token, namespace=self.namespace,
                    )  # fmt: skip
                    return self._kubeconfig
        return None

    def _event(self, kind: str, reason: str, message: str) -> None:
        self.node.record_event(self._pod, kind, reason, message)

    # -- status -------------------------------------------------------------------------------------------

    def _all_done(self) -> bool:
        return all(s.finished and s.run is None for s in self.slots) or any(
            s.finished and not s.succeeded for s in self.init_slots
        )

    def _phase(self) -> str:
        """The kubelet's getPhase, over this Pod's slots."""
        if any(s.finished and not s.succeeded for s in self.init_slots):
            return "Failed"
        if not all(s.succeeded for s in self.init_slots):
            return "Pending"
        waiting = running = stopped = succeeded = 0
        for slot in self.slots:
            terminated = slot.state.get("terminated") or slot.last_state.get("terminated")
            if slot.run is not None:
                running += 1
            elif terminated:
                stopped += 1
                succeeded += terminated.get("exitCode") == 0
            else:
                waiting += 1
        all_succeeded = running == waiting == 0 and stopped == succeeded
        if self._terminal_on_delete:
            phase = "Succeeded" if all_succeeded else "Failed"
        elif waiting:
            phase = "Pending"
        elif running or self.policy == "Always":
            phase = "Running"
        elif all_succeeded:
            phase = "Succeeded"
        else:
            phase = "Failed" if self.policy == "Never" else "Running"
        return phase

    def _condition(self, kind: str, true: bool, reason: str = "", message: str = "") -> Json:
        status = "True" if true else "False"
        previous = self._transitions.get(kind)
        if previous is None or previous[0] != status:
            self._transitions[kind] = (status, rfc3339())
        condition: Json = {"type": kind, "status": status, "lastTransitionTime": self._transitions[kind][1],
                           "lastProbeTime": None}  # fmt: skip
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        return condition

    def _status(self) -> Json:
        phase = self._phase()
        terminal = phase in ("Succeeded", "Failed")
        pending_init = [s.name for s in self.init_slots if not s.succeeded]
        unready = [s.name for s in self.slots if not s.ready]
        gates = [g["conditionType"] for g in self._pod["spec"].get("readinessGates", [])]
        current = {c["type"]: c.get("status") for c in self._pod.get("status", {}).get("conditions", [])}
        containers_ready = not unready and not terminal
        ready = containers_ready and all(current.get(g) == "True" for g in gates)
        if terminal:
            reason, message = "PodCompleted", ""
        elif unready:
            reason, message = "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"
        else:
            reason, message = "ReadinessGatesNotReady", ""
        init_message = f"containers with incomplete status: [{' '.join(pending_init)}]" if pending_init else ""
        conditions = [
            self._condition("PodReadyToStartContainers", not terminal),
            self._condition("Initialized", not pending_init, "ContainersNotInitialized" if pending_init else "",
                            init_message),
            self._condition("ContainersReady", containers_ready, "" if containers_ready else reason,
                            "" if containers_ready else message),
            self._condition("Ready", ready, "" if ready else reason, "" if ready else message),
        ]  # fmt: skip
        status: Json = {
            "phase": phase,
            "hostIP": LOOPBACK,
            "hostIPs": [{"ip": LOOPBACK}],
            "podIP": LOOPBACK,
            "podIPs": [{"ip": LOOPBACK}],
            "startTime": self.start_time,
            "conditions": conditions,
            "containerStatuses": [s.status() for s in self.slots],
        }
        if self.init_slots:
            status["initContainerStatuses"] = [s.status() for s in self.init_slots]
        return status

    def _report(self, force: bool = False) -> None:
        status = self._status()
        if status == self._reported or (not force and time.monotonic() < self._report_after):
            return
        # The uid makes the patch fail if the name now belongs to a new Pod (a StatefulSet replacement).
        body = {"metadata": {"uid": self.uid}, "status": status}
        try:
            rawapi.call(
                self.node.core.patch_namespaced_pod_status,
                self.pod_name, self.namespace, body, _content_type=STRATEGIC_MERGE,
            )  # fmt: skip
            self._reported = status
        except ApiException as error:
            if not self._still_exists():
                self._gone = True
            else:
                log.warning("pod %s/%s: status update failed: %s", self.namespace, self.pod_name, error.reason)
                self._report_after = time.monotonic() + 1.0

    def _still_exists(self) -> bool:
        """Whether the API still has this Pod (a uid mismatch on patch is a 422, so ask)."""
        try:
            current = rawapi.call(self.node.core.read_namespaced_pod, self.pod_name, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return bool(current["metadata"]["uid"] == self.uid)

    # -- stopping -----------------------------------------------------------------------------------------

    def _stop_all(self, grace: float, interruptible: bool) -> None:
        """SIGTERM every process, SIGKILL what outlives the grace period (or a node shutdown)."""
        runs = [s.run for s in (*self.init_slots, *self.slots) if s.run is not None]
        for run in runs:
            run.terminate(grace)
        while any(run.poll() is None for run in runs):
            for run in runs:
                run.enforce_deadline()
            if interruptible and (self._gone or self._shutdown is not None):
                for run in runs:
                    run.kill()
            time.sleep(0.05)
        for slot in (*self.init_slots, *self.slots):
            if slot.run is not None:
                slot.state = {
                    "terminated": slot.run.terminated_state(slot.spec.get("terminationMessagePolicy", "File"))
                }
                slot.run = None
            slot.ready = False

    def _terminate_and_finalize(self) -> None:
        grace = self._pod_grace()
        log.info("pod %s/%s: deleting, grace period %gs", self.namespace, self.pod_name, grace)
        for slot in self.slots:
            slot.ready = False
            if slot.run is not None:
                self._event("Normal", "Killing", f"Stopping container {slot.name}")
        self._report(force=True)
        self._stop_all(grace, interruptible=True)
        if self._gone:
            return
        self._terminal_on_delete = True
        self._report(force=True)
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
        try:
            rawapi.call(self.node.core.delete_namespaced_pod, self.pod_name, self.namespace, body=options)
        except ApiException as error:
            if error.status not in (404, 409):
                raise
        log.info("pod %s/%s: finalized", self.namespace, self.pod_name)
