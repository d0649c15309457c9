"""The one door to the process environment.

Nothing else in the project reads ``os.environ`` (ruff bans it elsewhere). Every
variable is listed in ``.env.example``. Readers are functions, so nothing is read
at import time and tests can change the environment before settings load.

Two modes:

* ``development`` (the default): missing secrets are generated once under
  ``var/secrets.json`` and missing service URLs come from the embedded servers
  recorded in ``var/services.json`` by ``python -m config.devservices``.
* ``production``: every required variable must be set; :func:`check_production`
  names each one that is missing or unsafe.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from django.core.exceptions import ImproperlyConfigured

Mode = Literal["development", "production"]

REPO_DIR = Path(__file__).resolve().parents[2]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _get(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}")


def _list(name: str) -> list[str] | None:
    raw = _get(name)
    if raw is None:
        return None
    return [item.strip() for item in raw.split(",") if item.strip()]


def mode() -> Mode:
    raw = (_get("PLATFORM_MODE") or "development").lower()
    if raw not in ("development", "production"):
        raise ImproperlyConfigured(f"PLATFORM_MODE must be development or production, got {raw!r}")
    return raw  # type: ignore[return-value]


def is_production() -> bool:
    return mode() == "production"


def var_dir() -> Path:
    """Where development data lives: embedded servers, generated secrets, uploads."""
    return Path(_get("PLATFORM_VAR_DIR") or REPO_DIR / "var")


def static_root() -> Path:
    """Where `manage.py collectstatic` writes and WhiteNoise serves from (DEBUG off)."""
    return Path(_get("STATIC_ROOT") or var_dir() / "static")


def media_root() -> Path:
    """Where thread files are stored (Django's default file storage)."""
    return Path(_get("MEDIA_ROOT") or var_dir() / "media")


def file_storage() -> dict[str, object]:
    """Django's default storage (thread files): the filesystem under MEDIA_ROOT, or S3
    (and S3-compatible servers) through django-storages when ``FILE_STORAGE=s3``."""
    kind = (_get("FILE_STORAGE") or "filesystem").lower()
    if kind == "filesystem":
        return {"BACKEND": "django.core.files.storage.FileSystemStorage"}
    if kind != "s3":
        raise ImproperlyConfigured(f"FILE_STORAGE must be filesystem or s3, got {kind!r}")
    bucket = _get("S3_BUCKET")
    if bucket is None:
        raise ImproperlyConfigured("S3_BUCKET is required when FILE_STORAGE=s3")
    options: dict[str, object] = {"bucket_name": bucket, "file_overwrite": False}
    for name, option in (
        ("S3_ENDPOINT_URL", "endpoint_url"),
        ("S3_REGION", "region_name"),
        ("S3_ACCESS_KEY_ID", "access_key"),
        ("S3_SECRET_ACCESS_KEY", "secret_key"),
    ):
        value = _get(name)
        if value is not None:
            options[option] = value
    return {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": options}


def debug() -> bool:
    return _bool("DEBUG", default=not is_production())


def platform_apps() -> list[str]:
    """Extensions to load besides those installed packages declare: module or Django app
    names (agents.registry.extensions)."""
    return _list("PLATFORM_APPS") or []


def allowed_hosts() -> list[str]:
    hosts = _list("ALLOWED_HOSTS")
    if hosts is not None:
        return hosts
    return ["localhost", "127.0.0.1", "[::1]", "testserver"]


def csrf_trusted_origins() -> list[str]:
    return _list("CSRF_TRUSTED_ORIGINS") or []


def cors_allowed_origins() -> list[str]:
    """Browser origins (``https://app.example.com``) whose pages may call ``/api/``; none by
    default. Each must be scheme://host[:port] (corsheaders' checks say which is not)."""
    return _list("CORS_ALLOWED_ORIGINS") or []


def runtime_id() -> str:
    return _get("PLATFORM_RUNTIME_ID") or "local"


def log_level() -> str:
    return (_get("LOG_LEVEL") or "INFO").upper()


def log_format() -> Literal["text", "json"]:
    """How log lines are written (``LOG_FORMAT``): ``text`` (the development default) or
    ``json``, one object a line with the ids of the work (the production default)."""
    raw = (_get("LOG_FORMAT") or ("json" if is_production() else "text")).lower()
    if raw not in ("text", "json"):
        raise ImproperlyConfigured(f"LOG_FORMAT must be text or json, got {raw!r}")
    return raw  # type: ignore[return-value]


def tracing() -> dict[str, Any]:
    """OpenTelemetry tracing (observability.tracing), from the standard ``OTEL_*`` variables:
    ``exporter`` is ``otlp`` (OTLP/HTTP to ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_ENDPOINT``, which the exporter reads with the ``OTEL_EXPORTER_OTLP_*``
    headers and timeout), ``console`` (spans printed) or None (off: no provider, no spans) when
    ``OTEL_TRACES_EXPORTER`` is ``none``, ``OTEL_SDK_DISABLED`` is true, or neither it nor an
    endpoint is set. ``capture_content``: prompts, completions and tool arguments and results
    go on the spans (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, off by default)."""
    endpoint = _get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _get("OTEL_EXPORTER_OTLP_ENDPOINT")
    named = (_get("OTEL_TRACES_EXPORTER") or ("otlp" if endpoint else "none")).lower()
    if named not in ("otlp", "console", "none"):
        raise ImproperlyConfigured(
            f"OTEL_TRACES_EXPORTER must be otlp, console or none, got {named!r}"
        )
    off = _bool("OTEL_SDK_DISABLED", False) or named == "none"
    return {
        "exporter": None if off else named,
        "service_name": _get("OTEL_SERVICE_NAME") or "standard-agents-platform",
        "capture_content": _bool("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", False),
    }


def metrics_settings() -> dict[str, Any]:
    """Prometheus metrics (observability.metrics): ``token`` is the bearer token ``/metrics``
    asks for (``METRICS_TOKEN``; unset, the route answers 404: never public by default);
    ``tenant_label`` adds a ``tenant`` label to the engine's families
    (``METRICS_TENANT_LABEL``, off: one series per tenant is the operator's choice);
    ``multiproc_dir`` is prometheus-client's shared directory (``PROMETHEUS_MULTIPROC_DIR``,
    which the library also reads itself), None in a single process."""
    return {
        "token": _get("METRICS_TOKEN") or "",
        "tenant_label": _bool("METRICS_TENANT_LABEL", False),
        "multiproc_dir": _get("PROMETHEUS_MULTIPROC_DIR"),
    }


def web_bind() -> tuple[str, int]:
    """Host and port ``make run`` serves on."""
    port = _get("PORT") or "8000"
    if not port.isdigit():
        raise ImproperlyConfigured(f"PORT must be a number, got {port!r}")
    return _get("HOST") or "127.0.0.1", int(port)


def _positive(name: str, default: int) -> int:
    raw = _get(name) or str(default)
    if not raw.isdigit() or int(raw) < 1:
        raise ImproperlyConfigured(f"{name} must be a positive number, got {raw!r}")
    return int(raw)


def db_pool_size() -> int:
    """Most PostgreSQL connections one process holds (its pool's max_size)."""
    return _positive("DB_POOL_SIZE", 20)


def browser_tests_required() -> bool:
    """Whether the console's browser tests must run (``BROWSER_TESTS=required``, as CI sets
    it): without Chromium they then fail instead of being skipped."""
    return (_get("BROWSER_TESTS") or "").strip().lower() == "required"


def ws_compression() -> bool:
    """Whether WebSocket frames may be compressed (permessage-deflate). Off by default: it
    costs the web process about a third more CPU per delivered event, for frames that are
    small JSON."""
    return _bool("WS_COMPRESSION", False)


def web_processes() -> int:
    """How many uvicorn worker processes serve the web tier (``WEB_PROCESSES``); by default
    one per CPU: a process runs Python on one core at a time."""
    return _positive("WEB_PROCESSES", os.cpu_count() or 1)


def celery_concurrency() -> int:
    """Flows one worker process runs at once (threads of Celery's threads pool). Flows spend
    their time waiting on model providers, holding neither the CPU nor a database
    connection meanwhile, and a process's held locks share one heartbeat: hundreds cost
    little, and a burst of slow-model turns does not queue behind a few slots."""
    return _positive("CELERY_CONCURRENCY", 256)


def flows_per_tenant() -> int:
    """Flows one tenant may run at once across every worker process; by default all but an
    eighth of one worker's ``CELERY_CONCURRENCY`` (all but one of 8, at least 1), so one
    tenant never holds every slot of a worker. A flow holds a worker thread and, only while
    it reads or writes, a database connection."""
    concurrency = celery_concurrency()
    return _positive("FLOWS_PER_TENANT", max(1, concurrency - concurrency // 8))


def celery_queue() -> str:
    """The broker queue web processes send work to and workers consume (default ``celery``);
    deployments sharing one Redis each name their own."""
    return _get("CELERY_QUEUE") or "celery"


def thread_lock_ttl_ms() -> int:
    """How long a crashed worker's thread lock outlives it (renewed while it runs)."""
    return _positive("THREAD_LOCK_TTL_MS", 4_000)


def thread_sweep_interval_s() -> int:
    """How often beat re-wakes threads with work but no live worker."""
    return _positive("THREAD_SWEEP_INTERVAL_S", 2)


def beat_leader_lease_s() -> float:
    """Seconds a beat's leadership of the periodic duties lasts unless its scheduling loop
    renews it (every third of it); a standby beat takes over this long after the leader
    stops (config.beat_watch)."""
    return _positive_float("BEAT_LEADER_LEASE_S", 10.0)


def beat_idle_max_s() -> float:
    """Seconds beat leaves a duty that said it has nothing to do unsent, at most
    (common.duties); the thread sweep's is at most ``THREAD_SWEEP_GRACE_S``."""
    return _positive_float("BEAT_IDLE_MAX_S", 60.0)


def worker_heartbeat_ttl_s() -> float:
    """Seconds a worker's heartbeat key lives; the worker rewrites it every third of that,
    and ``/readyz`` counts the worker gone once it lapses (observability.workers)."""
    return _positive_float("WORKER_HEARTBEAT_TTL_S", 15.0)


def thread_sweep_grace_s() -> int:
    """How long a waiting turn's wake-up may sit in the broker before the sweeper sends
    another (a lost one is recovered this much later)."""
    return _positive("THREAD_SWEEP_GRACE_S", 10)


def subagent_max_depth() -> int:
    """How deep a subagent tree may grow (a top-level thread is depth 0)."""
    return _positive("SUBAGENT_MAX_DEPTH", 5)


def subagent_max_children() -> int:
    """Live (not terminated) children one thread may have, whatever its relationships say."""
    return _positive("SUBAGENT_MAX_CHILDREN", 50)


def subagent_wait_s() -> int:
    """How long a blocking subagent call waits for the child's session before it answers
    that the result will arrive as a message."""
    return _positive("SUBAGENT_WAIT_S", 600)


def variable_request_ttl_s() -> int:
    """How long a pending variable-bootstrap request can be completed."""
    return _positive("VARIABLE_REQUEST_TTL_S", 86_400)


def action_ttl_s() -> int:
    """How long a person has to answer an action (an approval or an input request) when its
    rule names no ``expires_in``."""
    return _positive("ACTION_TTL_S", 86_400)


def action_sweep_interval_s() -> int:
    """How often beat resolves the actions that expired."""
    return _positive("ACTION_SWEEP_INTERVAL_S", 15)


def effect_eta_horizon_s() -> int:
    """Effects due within this many seconds get a broker message with an ETA when scheduled;
    later ones are sent by the sweep as they fall due (below the broker's visibility
    timeout, so a held message is never delivered twice for that reason)."""
    return _positive("EFFECT_ETA_HORIZON_S", 600)


def effect_sweep_interval_s() -> float:
    """How often beat sends the effects that fall due and re-sends those past due."""
    return float(_positive("EFFECT_SWEEP_INTERVAL_S", 1))


def effect_sweep_grace_s() -> float:
    """An effect this many seconds past its deadline lost its delivery: the sweep sends it."""
    return float(_positive("EFFECT_SWEEP_GRACE_S", 2))


def webhook_settings() -> dict[str, Any]:
    """Webhooks (threads.services.webhooks): whether URLs may be plain http, the
    attempt timeout, the retries (exponential from a base, capped, jittered) and when an
    endpoint that keeps failing is disabled, how long a rotated secret keeps signing, and
    how long subscriptions are cached per process."""
    return {
        "WEBHOOK_ALLOW_HTTP": _bool("WEBHOOK_ALLOW_HTTP", False),
        "WEBHOOK_TIMEOUT_S": _positive("WEBHOOK_TIMEOUT_S", 10),
        "WEBHOOK_MAX_ATTEMPTS": _positive("WEBHOOK_MAX_ATTEMPTS", 8),
        "WEBHOOK_RETRY_BASE_S": _positive_float("WEBHOOK_RETRY_BASE_S", 5.0),
        "WEBHOOK_RETRY_MAX_S": _positive("WEBHOOK_RETRY_MAX_S", 3600),
        "WEBHOOK_DISABLE_AFTER": _positive("WEBHOOK_DISABLE_AFTER", 20),
        "WEBHOOK_SECRET_OVERLAP_S": _positive("WEBHOOK_SECRET_OVERLAP_S", 86_400),
        "WEBHOOK_CACHE_S": _positive_float("WEBHOOK_CACHE_S", 2.0),
    }


def egress_allowed_networks() -> list[str]:
    """``EGRESS_ALLOWED_NETWORKS``: comma-separated networks (``10.0.0.0/8``) or addresses
    that calls to tenant-chosen URLs may reach although not public (common.egress); none
    by default, in every mode."""
    cidrs = _list("EGRESS_ALLOWED_NETWORKS") or []
    networks = []
    for cidr in cidrs:
        try:
            networks.append(str(ipaddress.ip_network(cidr)))
        except ValueError as error:
            raise ImproperlyConfigured(
                f"EGRESS_ALLOWED_NETWORKS must list networks such as 10.0.0.0/8, got {cidr!r}: "
                f"{error}"
            ) from error
    return networks


def egress_allowed_hosts() -> list[str]:
    """``EGRESS_ALLOWED_HOSTS``: comma-separated names (``llm.internal``) or suffixes
    (``*.internal``) whose addresses calls to tenant-chosen URLs may reach whatever they
    are (common.egress); none by default, in every mode."""
    hosts = [host.lower().rstrip(".") for host in _list("EGRESS_ALLOWED_HOSTS") or []]
    for host in hosts:
        name = host.removeprefix("*.")
        if not name or "*" in name or "/" in name or ":" in name:
            raise ImproperlyConfigured(
                "EGRESS_ALLOWED_HOSTS must list host names (llm.internal) or suffixes "
                f"(*.internal), got {host!r}"
            )
    return hosts


def _positive_float(name: str, default: float) -> float:
    raw = _get(name) or str(default)
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ImproperlyConfigured(f"{name} must be a positive number, got {raw!r}")
    return value


def sandbox_pool_size() -> int:
    """Warm QuickJS runner processes per web or worker process (run_code, code tools)."""
    return _positive("SANDBOX_POOL_SIZE", 2)


def sandbox_cpu_limit_s() -> int:
    """CPU seconds one sandbox call may use (the kernel kills a runner past it plus 1 s)."""
    return _positive("SANDBOX_CPU_LIMIT_S", 60)


def sandbox_address_space_mb() -> int:
    """Address space of one sandbox runner process, in MiB (at least 320)."""
    return _positive("SANDBOX_ADDRESS_SPACE_MB", 1024)


def sandbox_tenant_concurrency() -> int:
    """Code tools and code-mode programs one tenant's flows may run at once, across every
    worker process; by default half of one process's runners (``SANDBOX_POOL_SIZE`` / 2, at
    least 1), so one tenant never holds a worker's whole pool."""
    return _positive("SANDBOX_TENANT_CONCURRENCY", max(1, sandbox_pool_size() // 2))


def sandbox_wait_s() -> int:
    """Seconds a flow's code tool or program waits for its start (its tenant's turn, then a
    free runner of its worker) before its call fails as ``sandbox_busy``; its budget
    (``CODE_TOOL_TIMEOUT_S``) counts only from its start."""
    return _positive("SANDBOX_WAIT_S", 60)


def run_code_tenant_concurrency() -> int:
    """``POST …/run-code`` calls one tenant may have running at once, across every web
    process; keep it below ``SANDBOX_POOL_SIZE`` so one tenant never holds a whole pool."""
    return _positive("RUN_CODE_TENANT_CONCURRENCY", 1)


def run_code_runner_wait_s() -> int:
    """Seconds a ``POST …/run-code`` call waits for a free runner of its web process before
    it is answered 503 with ``Retry-After``."""
    return _positive("RUN_CODE_RUNNER_WAIT_S", 1)


def code_tool_timeout_s() -> int:
    """Seconds a code tool may run before it is terminated and its call fails."""
    return _positive("CODE_TOOL_TIMEOUT_S", 30)


def request_body_timeout_s() -> int:
    """Seconds a request body may go without a new piece arriving before it is answered 408
    (an idle timeout: a slow but steady upload is never cut)."""
    return _positive("REQUEST_BODY_TIMEOUT_S", 30)


def login_throttle_settings() -> dict[str, int]:
    """Failed console and admin logins (tenancy.logins): how many one account may fail from
    one client address, how many one address may fail across accounts (higher: it stops one
    address trying many accounts), and how long a lock lasts after the last failure."""
    return {
        "LOGIN_FAILURES_PER_ACCOUNT": _positive("LOGIN_FAILURES_PER_ACCOUNT", 5),
        "LOGIN_FAILURES_PER_ADDRESS": _positive("LOGIN_FAILURES_PER_ADDRESS", 50),
        "LOGIN_LOCKOUT_S": _positive("LOGIN_LOCKOUT_S", 900),
    }


def api_key_throttle_settings() -> dict[str, int]:
    """Failed API-key authentications (tenancy.throttling): how many one client address may
    have in a window, how many for one presented key prefix from one address, and the
    window's length."""
    return {
        "API_KEY_FAILURES_PER_ADDRESS": _positive("API_KEY_FAILURES_PER_ADDRESS", 30),
        "API_KEY_FAILURES_PER_PREFIX": _positive("API_KEY_FAILURES_PER_PREFIX", 10),
        "API_KEY_FAILURE_WINDOW_S": _positive("API_KEY_FAILURE_WINDOW_S", 60),
    }


def _count(name: str, default: int) -> int:
    raw = _get(name) or str(default)
    if not raw.isdigit():
        raise ImproperlyConfigured(f"{name} must be a number (0 or more), got {raw!r}")
    return int(raw)


def usage_quota_settings() -> dict[str, int]:
    """Quotas (usage.quotas), 0 meaning unlimited: API requests per minute per tenant and
    per API key, turns started through the API per minute per tenant, and model tokens per
    minute and per day per tenant (unlimited by default). A tenant's ``TenantQuota`` row
    (admin) overrides each."""
    return {
        "USAGE_REQUESTS_PER_MINUTE": _count("USAGE_REQUESTS_PER_MINUTE", 6000),
        "USAGE_KEY_REQUESTS_PER_MINUTE": _count("USAGE_KEY_REQUESTS_PER_MINUTE", 3000),
        "USAGE_TURNS_PER_MINUTE": _count("USAGE_TURNS_PER_MINUTE", 600),
        "USAGE_TOKENS_PER_MINUTE": _count("USAGE_TOKENS_PER_MINUTE", 0),
        "USAGE_TOKENS_PER_DAY": _count("USAGE_TOKENS_PER_DAY", 0),
    }


def retention_audit_days() -> int:
    """Days the audit trail keeps its entries (audit.prune), for every tenant; 0: forever."""
    return _count("RETENTION_AUDIT_DAYS", 365)


def retention_settings() -> dict[str, int]:
    """Retention (retention.prune): the operator's default of each tenant's policy, in days,
    0 meaning keep forever (a tenant's ``RetentionPolicy`` row in the admin overrides each),
    and the seconds between the beat task's runs."""
    return {
        "RETENTION_EVENTS_DAYS": _count("RETENTION_EVENTS_DAYS", 90),
        "RETENTION_LOGS_DAYS": _count("RETENTION_LOGS_DAYS", 90),
        "RETENTION_WEBHOOK_DELIVERIES_DAYS": _count("RETENTION_WEBHOOK_DELIVERIES_DAYS", 30),
        "RETENTION_FINISHED_TURNS_DAYS": _count("RETENTION_FINISHED_TURNS_DAYS", 180),
        "RETENTION_TERMINATED_THREADS_DAYS": _count("RETENTION_TERMINATED_THREADS_DAYS", 0),
        "RETENTION_PRUNE_INTERVAL_S": _positive("RETENTION_PRUNE_INTERVAL_S", 3600),
    }


# Secrets -------------------------------------------------------------------


def _dev_secrets() -> dict[str, object]:
    """Throwaway development secrets, generated once and kept under var/."""
    path = var_dir() / "secrets.json"
    if path.exists():
        loaded: dict[str, object] = json.loads(path.read_text())
        return loaded
    generated: dict[str, object] = {
        "secret_key": secrets.token_urlsafe(50),
        "encryption_keys": [base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(generated, handle)
    return generated


def secret_key() -> str:
    value = _get("SECRET_KEY")
    if value is not None:
        return value
    if is_production():
        raise ImproperlyConfigured("SECRET_KEY is required in production")
    return str(_dev_secrets()["secret_key"])


def encryption_keys() -> list[str]:
    """Master keys, newest first: the first encrypts, all decrypt."""
    keys = _list("PLATFORM_ENCRYPTION_KEYS")
    if keys is not None:
        return keys
    if is_production():
        raise ImproperlyConfigured("PLATFORM_ENCRYPTION_KEYS is required in production")
    stored = _dev_secrets()["encryption_keys"]
    assert isinstance(stored, list)
    return [str(key) for key in stored]


def agent_platform_env() -> dict[str, str]:
    """The platform level of agent env lookups (after thread, tool, agent, prompt, tenant),
    which only the operator's registry code (Python tools, hooks) reads.

    Only the variables named in ``AGENT_PLATFORM_ENV`` are passed on (default: none), never
    the whole process environment. Provider keys reach models through platform credentials
    (:func:`platform_provider_credentials`), not through this level.
    """
    names = _list("AGENT_PLATFORM_ENV") or []
    return {name: value for name in names if (value := _get(name)) is not None}


# The key a local OpenAI-compatible server gets when OPENAI_BASE_URL is set without a key.
LOCAL_SERVER_KEY = "local-server"


def platform_provider_credentials() -> dict[str, dict[str, str | None]]:
    """The operator's provider keys, as platform credentials by provider: ``{"openai":
    {"api_key", "base_url"}}`` from ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` (the base URL
    alone: a local server, which gets a placeholder key) and ``ANTHROPIC_API_KEY`` /
    ``ANTHROPIC_BASE_URL``. ``base_url`` None is the official endpoint."""
    found: dict[str, dict[str, str | None]] = {}
    if _get("OPENAI_API_KEY") or _get("OPENAI_BASE_URL"):
        found["openai"] = {
            "api_key": _get("OPENAI_API_KEY") or LOCAL_SERVER_KEY,
            "base_url": _get("OPENAI_BASE_URL"),
        }
    if _get("ANTHROPIC_API_KEY"):
        found["anthropic"] = {
            "api_key": _get("ANTHROPIC_API_KEY"),
            "base_url": _get("ANTHROPIC_BASE_URL"),
        }
    return found


def provider_base_urls_allowed() -> list[str]:
    """Base URLs a model may use with a platform credential besides the provider's official
    endpoint and the credential's own base URL (``OPENAI_BASE_URL`` for ``platform:openai``,
    ``ANTHROPIC_BASE_URL`` for ``platform:anthropic``): ``PROVIDER_BASE_URLS_ALLOWED``,
    comma-separated."""
    return _list("PROVIDER_BASE_URLS_ALLOWED") or []


def platform_credentials_granted() -> bool:
    """Whether a tenant may use platform credentials when its admin toggle is left at the
    default (``PLATFORM_CREDENTIALS_GRANTED``, default false)."""
    return _bool("PLATFORM_CREDENTIALS_GRANTED", False)


def demo_model_ids() -> dict[str, str]:
    """The demo agents' model per provider: ``OPENAI_MODEL`` (default gpt-4o-mini) and
    ``ANTHROPIC_MODEL`` (default claude-3-5-haiku-latest)."""
    return {
        "openai": _get("OPENAI_MODEL") or "gpt-4o-mini",
        "anthropic": _get("ANTHROPIC_MODEL") or "claude-3-5-haiku-latest",
    }


# Services ------------------------------------------------------------------


def services_file() -> Path:
    return var_dir() / "services.json"


def _embedded_url(key: str) -> str | None:
    path = services_file()
    if not path.exists():
        return None
    value = json.loads(path.read_text()).get(key)
    return str(value) if value else None


def _service_url(name: str, key: str) -> str:
    value = _get(name)
    if value is not None:
        return value
    if not is_production():
        embedded = _embedded_url(key)
        if embedded is not None:
            return embedded
    raise ImproperlyConfigured(
        f"{name} is not set and no embedded server is recorded in {services_file()}; "
        "set it, or start the embedded servers with `python -m config.devservices up`"
    )


def database_url() -> str:
    return _service_url("DATABASE_URL", "database_url")


def database_migrate_url() -> str | None:
    """The URL migrations connect with: the role that owns the tables. Unset, migrations
    use ``DATABASE_URL``'s role (then that role owns the tables; with a role that is no
    superuser, the tenant wall still holds: its policies are forced on the owner too)."""
    explicit = _get("DATABASE_MIGRATE_URL")
    if explicit is not None or _get("DATABASE_URL") is not None or is_production():
        return explicit
    return _embedded_url("database_migrate_url")


def tenant_wall_strict() -> bool:
    """A statement on a tenant-owned table outside any tenant or system context raises
    instead of seeing nothing (the test suite turns this on; common.tenant_wall)."""
    return _bool("TENANT_WALL_STRICT", default=False)


def redis_url() -> str:
    return _service_url("REDIS_URL", "redis_url")


def configured_service_urls() -> dict[str, str | None]:
    """The service URLs the operator set explicitly (embedded servers are not consulted)."""
    return {"DATABASE_URL": _get("DATABASE_URL"), "REDIS_URL": _get("REDIS_URL")}


def child_environment(overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment plus ``overrides``, for processes we start. A
    ``DATABASE_URL`` given without a ``DATABASE_MIGRATE_URL`` drops the inherited one: the
    owner's URL belongs to the database it was set beside."""
    inherited = dict(os.environ)
    if "DATABASE_URL" in overrides and "DATABASE_MIGRATE_URL" not in overrides:
        inherited.pop("DATABASE_MIGRATE_URL", None)
    return {**inherited, **overrides}


# Production guard ----------------------------------------------------------


def check_production() -> None:
    """Refuse to start production without real configuration, naming every problem."""
    if not is_production():
        return
    problems = [
        f"{name} is required in production"
        for name in (
            "SECRET_KEY",
            "PLATFORM_ENCRYPTION_KEYS",
            "DATABASE_URL",
            "REDIS_URL",
            "ALLOWED_HOSTS",
        )
        if _get(name) is None
    ]
    if debug():
        problems.append("DEBUG must be false in production")
    key = _get("SECRET_KEY")
    if key is not None and len(key) < 50:
        problems.append("SECRET_KEY must be at least 50 characters in production")
    if problems:
        raise ImproperlyConfigured("Refusing to start: " + "; ".join(problems))
