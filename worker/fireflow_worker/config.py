"""Worker configuration, read from the environment with the names and defaults of the TypeScript worker's README.

Every variable is validated at start; a bad value is one line naming the variable, what is wrong with the
value and the accepted range, and the process exits with status 2. The database URL's password never
appears in any message (see `redact_url`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from fireflow_contract import worker_variables
from fireflow_contract.dburl import POSTGRES_SCHEMES, redact_url, url_problem
from fireflow_contract.executor_ids import MAX_EXECUTOR_ID_CHARS, MAX_PROCESSES, child_executor_id
from fireflow_contract.logformat import LOG_FORMAT_ENV, LogFormat
from fireflow_contract.queues import ALL_QUEUES, BACKGROUND, EXECUTIONS, SANDBOX, TERMINAL
from fireflow_worker.processes import default_processes

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
APP_NAME_PATTERN = re.compile(r"^[a-z0-9_-]{3,256}$")


class ConfigError(Exception):
    """A configuration value is invalid; the message is one line, safe to print."""


def _blank_is_unset(value: Any) -> Any:
    return None if isinstance(value, str) and value.strip() == "" else value


def _parse_bool(value: Any) -> Any:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError("must be true or false")
    return value


def _auto_is_unset(value: Any) -> Any:
    return None if isinstance(value, str) and value.strip().lower() == "auto" else value


def _upper_log_level(value: Any) -> Any:
    # DBOS rejects lower-case levels; the TypeScript FireFlow execution worker's default is "info".
    return value.strip().upper() if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _split_queues(value: Any) -> Any:
    if isinstance(value, str):
        if value.strip().lower() in ("", "all"):
            return list(ALL_QUEUES)
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _known_queues(queues: list[str]) -> list[str]:
    unknown = [name for name in queues if name not in ALL_QUEUES]
    if unknown:
        raise ValueError(f"unknown queue {unknown[0]!r}; known: {', '.join(ALL_QUEUES)} or all")
    if not queues:
        raise ValueError(f"must name at least one of {', '.join(ALL_QUEUES)}")
    return list(dict.fromkeys(queues))


def _app_name(value: str) -> str:
    if not APP_NAME_PATTERN.match(value):
        raise ValueError("must be 3 to 256 characters of a-z, 0-9, '-' and '_'")
    return value


Bool = Annotated[bool, BeforeValidator(_parse_bool)]


DEFAULT_APPLICATION_VERSION = "1"


class WorkerConfig(BaseModel):
    """The worker's settings; field aliases are the environment variable names."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")

    database_url: str | None = Field(None, alias=worker_variables.DATABASE_URL)
    local_mode: Bool = Field(False, alias=worker_variables.LOCAL_MODE)
    local_sqlite_path: str = Field("fireflow-local.sqlite", alias=worker_variables.LOCAL_SQLITE_PATH)
    application_name: Annotated[str, AfterValidator(_app_name)] = Field(
        "fireflow", alias=worker_variables.APPLICATION_NAME
    )
    # Not the package's version: a plain upgrade of the worker must not strand the PENDING runs of the
    # previous one (DBOS lets only a run's own version recover it). Change it for an incompatible engine change.
    application_version: str = Field(
        DEFAULT_APPLICATION_VERSION, alias=worker_variables.APPLICATION_VERSION, min_length=1, max_length=128
    )
    # DBOS hands version-less runs to its latest version only. standalone: refuse to start when this
    # version is not the latest (it would take no new run); claim-latest: make it the latest (a rollback);
    # managed: the operator decides (an older version keeps serving its own runs while it retires).
    version_role: Literal["standalone", "claim-latest", "managed"] = Field(
        "standalone", alias=worker_variables.VERSION_ROLE
    )
    worker_concurrency: int = Field(50, alias=worker_variables.WORKER_CONCURRENCY, ge=1, le=10_000)
    queue_concurrency: int = Field(0, alias=worker_variables.QUEUE_CONCURRENCY, ge=0, le=1_000_000)
    polling_interval_ms: int = Field(50, alias=worker_variables.POLLING_INTERVAL_MS, ge=1, le=600_000)
    pool_size: int = Field(30, alias=worker_variables.POOL_SIZE, ge=2, le=1_000)
    worker_id: str | None = Field(
        None, alias=worker_variables.WORKER_ID, min_length=1, max_length=MAX_EXECUTOR_ID_CHARS
    )
    run_migrations: Bool = Field(True, alias=worker_variables.RUN_MIGRATIONS)
    drain_timeout_ms: int = Field(25_000, alias=worker_variables.DRAIN_TIMEOUT_MS, ge=0, le=3_600_000)
    log_level: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_upper_log_level)
    ] = Field("INFO", alias=worker_variables.LOG_LEVEL)
    provision_cache_ttl_ms: int = Field(10_000, alias=worker_variables.PROVISION_CACHE_TTL_MS, ge=0, le=86_400_000)
    sandbox_concurrency: int = Field(10, alias=worker_variables.SANDBOX_CONCURRENCY, ge=1, le=10_000)
    terminal_concurrency: int = Field(10, alias=worker_variables.TERMINAL_CONCURRENCY, ge=1, le=10_000)
    queues: Annotated[list[str], BeforeValidator(_split_queues), AfterValidator(_known_queues)] = Field(
        default_factory=lambda: list(ALL_QUEUES), alias=worker_variables.QUEUES
    )
    health_host: str = Field("0.0.0.0", alias=worker_variables.HEALTH_HOST)  # noqa: S104 - probes reach the pod IP
    health_port: int = Field(8080, alias=worker_variables.HEALTH_PORT, ge=0, le=65_535)
    # Per-run limits (see run_limits.py): what one run may take from its worker.
    max_node_output_bytes: int = Field(4 << 20, alias="FIREFLOW_MAX_NODE_OUTPUT_BYTES", ge=1024, le=1 << 30)
    max_run_output_bytes: int = Field(16 << 20, alias="FIREFLOW_MAX_RUN_OUTPUT_BYTES", ge=1024, le=4 << 30)
    max_parallel_nodes: int = Field(8, alias="FIREFLOW_MAX_PARALLEL_NODES", ge=1, le=1_000)
    max_flow_nodes: int = Field(1_000, alias="FIREFLOW_MAX_FLOW_NODES", ge=1, le=100_000)
    # Times a run may be recovered after its worker died while running it (DBOS's max_recovery_attempts).
    max_recovery_attempts: int = Field(10, alias="FIREFLOW_MAX_RECOVERY_ATTEMPTS", ge=0, le=10_000)
    # Polling intervals of the other queues; unset = DBOS_QUEUE_POLLING_INTERVAL_MS (see dispatcher.py).
    background_polling_interval_ms: int | None = Field(
        None, alias="FIREFLOW_BACKGROUND_QUEUE_POLLING_INTERVAL_MS", ge=1, le=600_000
    )
    sandbox_polling_interval_ms: int | None = Field(
        None, alias="FIREFLOW_SANDBOX_QUEUE_POLLING_INTERVAL_MS", ge=1, le=600_000
    )
    terminal_polling_interval_ms: int | None = Field(
        None, alias="FIREFLOW_TERMINAL_QUEUE_POLLING_INTERVAL_MS", ge=1, le=600_000
    )
    # Claim when notified of an enqueue (plus this safety poll) instead of DBOS polling every queue.
    claim_on_notify: Bool = Field(True, alias="FIREFLOW_CLAIM_ON_NOTIFY")
    idle_poll_interval_ms: int = Field(5_000, alias="FIREFLOW_IDLE_POLL_INTERVAL_MS", ge=10, le=600_000)
    # Worker processes in this pod (see processes.py); unset or "auto" = from the pod's CPU limit.
    worker_processes: Annotated[int | None, BeforeValidator(_auto_is_unset)] = Field(
        None, alias=worker_variables.PROCESSES, ge=1, le=MAX_PROCESSES
    )
    # SQLAlchemy's ping before every pooled checkout: one more round trip per database transaction.
    pool_pre_ping: Bool = Field(False, alias="FIREFLOW_POOL_PRE_PING")
    # Every line of the process as text or as one JSON object (see logformat.py).
    log_format: Annotated[LogFormat, BeforeValidator(_lower)] = Field("text", alias=LOG_FORMAT_ENV)

    @model_validator(mode="after")
    def _database_or_local(self) -> WorkerConfig:
        if self.database_url is None and not self.local_mode:
            raise ValueError(
                "DATABASE_URL_EXECUTIONS is required (a postgresql:// URL); "
                "set FIREFLOW_LOCAL_MODE=true to run on a local SQLite file instead"
            )
        if self.database_url is not None:
            shown = f"DATABASE_URL_EXECUTIONS={redact_url(self.database_url)!r}"
            if not self.database_url.startswith(POSTGRES_SCHEMES):
                raise ValueError(f"{shown} must be a postgresql:// URL")
            if problem := url_problem(self.database_url):
                raise ValueError(f"{shown} {problem}")
        longest = child_executor_id(self.worker_id, self.processes - 1) or ""
        if len(longest) > MAX_EXECUTOR_ID_CHARS:
            raise ValueError(
                f"FIREFLOW_WORKER_ID is too long for {self.processes} processes: the last one's executor id "
                f"{longest[:40]!r}... would have {len(longest)} characters, more than {MAX_EXECUTOR_ID_CHARS}"
            )
        if self.max_run_output_bytes < self.max_node_output_bytes:
            raise ValueError(
                f"FIREFLOW_MAX_RUN_OUTPUT_BYTES={self.max_run_output_bytes} must be at least "
                f"FIREFLOW_MAX_NODE_OUTPUT_BYTES={self.max_node_output_bytes}"
            )
        return self

    @property
    def system_database_url(self) -> str:
        """The URL DBOS connects to: PostgreSQL, or SQLite only in explicit local mode."""
        if self.database_url is not None:
            return self.database_url
        return f"sqlite:///{self.local_sqlite_path}"

    @property
    def processes(self) -> int:
        """Worker processes in this pod: the setting, else one per core of the CPU limit."""
        return self.worker_processes if self.worker_processes is not None else default_processes()

    @property
    def executor_id(self) -> str:
        return self.worker_id or "local"

    @property
    def background_concurrency(self) -> int:
        return max(1, self.worker_concurrency // 2)

    @property
    def polling_intervals_ms(self) -> dict[str, int]:
        """Each queue's polling interval: the least time between two claims of it by one worker."""
        return {
            EXECUTIONS: self.polling_interval_ms,
            BACKGROUND: self.background_polling_interval_ms or self.polling_interval_ms,
            SANDBOX: self.sandbox_polling_interval_ms or self.polling_interval_ms,
            TERMINAL: self.terminal_polling_interval_ms or self.polling_interval_ms,
        }

    @property
    def listens_for_work(self) -> bool:
        """Claims on notification (PostgreSQL only: SQLite has no LISTEN)."""
        return self.claim_on_notify and self.database_url is not None

    @property
    def global_concurrency(self) -> int | None:
        # DBOS raises on 0; the TypeScript FireFlow execution worker's 0 means "no cap".
        return self.queue_concurrency or None


def _field_hint(field_name: str) -> str:
    """The accepted range of a field, from its constraints."""
    if field_name == "worker_processes":
        return f"auto or an integer from 1 to {MAX_PROCESSES}"
    info = WorkerConfig.model_fields[field_name]
    bounds = {type(m).__name__: m for m in info.metadata}
    ge = getattr(bounds.get("Ge"), "ge", None)
    le = getattr(bounds.get("Le"), "le", None)
    if ge is not None and le is not None:
        return f"an integer from {ge} to {le}"
    if info.annotation is bool or field_name in ("local_mode", "run_migrations", "claim_on_notify", "pool_pre_ping"):
        return "true or false"
    if field_name == "log_level":
        return "one of debug, info, warning, error, critical (any case)"
    if field_name == "log_format":
        return "text or json"
    return ""


def load_config(environ: Mapping[str, str] | None = None) -> WorkerConfig:
    """Read and validate the worker's configuration; raise `ConfigError` with one printable line."""
    env = dict(os.environ if environ is None else environ)
    for name, alias in (
        (worker_variables.WORKER_ID, worker_variables.WORKER_ID_ALIAS),
        (worker_variables.APPLICATION_VERSION, worker_variables.APPLICATION_VERSION_ALIAS),
    ):
        if not env.get(name) and env.get(alias):
            env[name] = env[alias]
    aliases = {info.alias for info in WorkerConfig.model_fields.values() if info.alias}
    values = {name: _blank_is_unset(env[name]) for name in aliases if name in env}
    values = {name: value for name, value in values.items() if value is not None}
    try:
        return WorkerConfig.model_validate(values)
    except ValidationError as err:
        raise ConfigError(_one_line(err, values)) from None


def _one_line(err: ValidationError, values: Mapping[str, Any]) -> str:
    first = err.errors(include_url=False)[0]
    loc = first.get("loc", ())
    if not loc:  # a model-level rule: its message already names the variables
        return str(first["msg"]).removeprefix("Value error, ")
    alias = str(loc[0])
    field_name = next((name for name, info in WorkerConfig.model_fields.items() if info.alias == alias), alias)
    raw = values.get(alias, "")
    shown = redact_url(str(raw)) if alias == worker_variables.DATABASE_URL else str(raw)
    problem = str(first["msg"]).removeprefix("Value error, ")
    hint = _field_hint(field_name)
    accepted = f"; accepted: {hint}" if hint else ""
    return f"invalid {alias}={shown!r}: {problem}{accepted}"
