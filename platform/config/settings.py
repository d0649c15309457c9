"""Django settings. Every value from the environment comes through :mod:`config.env`."""

from __future__ import annotations

import datetime as dt
import warnings
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import django_stubs_ext
from corsheaders.defaults import default_headers as default_cors_headers
from django.core.exceptions import ImproperlyConfigured

from agents.registry.extensions import extension_apps
from config import env

env.check_production()
# Lets admin, queryset and serializer classes be subscripted at runtime (for typing).
django_stubs_ext.monkeypatch()


# psycopg's own default: a statement is prepared on its fifth run on one connection.
PREPARE_THRESHOLD = 5


def _database(url: str, name: str = "DATABASE_URL") -> dict[str, Any]:
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ImproperlyConfigured(
            f"{name} must be a postgresql:// URL, got scheme {parts.scheme!r}"
        )
    options: dict[str, Any] = dict(parse_qsl(parts.query))
    # A per-process pool (psycopg_pool): under ASGI, Django's persistent connections
    # are per thread and closed after each request, so pooling is what avoids a
    # fresh connection per request.
    # A read (GET, HEAD, OPTIONS) waits at most read_timeout for a connection while
    # PostgreSQL is unreachable, then answers 503 with Retry-After; a write, or any caller
    # while the pool is merely busy, waits up to timeout (common.db_backend.pool).
    options.setdefault(
        "pool",
        {"min_size": 1, "max_size": env.db_pool_size(), "timeout": 10, "read_timeout": 1},
    )
    # A silent server must not hang a connection attempt forever (libpq waits unbounded).
    options.setdefault("connect_timeout", 5)
    # Parameters travel apart from the statement, and psycopg prepares a statement once a
    # connection has run it PREPARE_THRESHOLD times, so PostgreSQL stops parsing and
    # planning it each time. ?server_side_binding=false turns both off (for a pooler that
    # cannot keep prepared statements, such as PgBouncer in transaction mode before 1.21).
    binding = options.get("server_side_binding", "true") not in ("false", "0", "no", "off")
    options["server_side_binding"] = binding
    options["prepare_threshold"] = int(options.get("prepare_threshold", PREPARE_THRESHOLD))
    if not binding:
        options["prepare_threshold"] = None
    return {
        "ENGINE": "common.db_backend",  # Django's, with an outage-aware pool
        "NAME": unquote(parts.path.lstrip("/")) or "platform",
        "USER": unquote(parts.username or "postgres"),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": options.pop("host", parts.hostname or ""),
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
        "CONN_MAX_AGE": 0,
    }


BASE_DIR = env.REPO_DIR
VAR_DIR = env.var_dir()
PLATFORM_MODE = env.mode()
PLATFORM_RUNTIME_ID = env.runtime_id()
# OpenTelemetry traces (observability.tracing; env.tracing says what each is).
TRACING = env.tracing()
# Prometheus metrics (observability.metrics; env.metrics_settings says what each is).
METRICS = env.metrics_settings()

SECRET_KEY = env.secret_key()
DEBUG = env.debug()
ALLOWED_HOSTS = env.allowed_hosts()
CSRF_TRUSTED_ORIGINS = env.csrf_trusted_origins()
CSRF_FAILURE_VIEW = "common.api.csrf_failure"

# Master keys for envelope encryption (common.crypto); newest first.
PLATFORM_ENCRYPTION_KEYS = env.encryption_keys()
# Registry items (function tools, hooks, effects, thread endpoints from agent_tools
# modules) only some tenants may use; everything not listed is open to every tenant.
# {"tools": {"send_invoice": ["acme"]}, "hooks": {...}, "effects": {...}, "endpoints": {...}}
AGENT_REGISTRY_RESTRICTED: dict[str, dict[str, list[str]]] = {}
# The platform level of agent env lookups, read only by the operator's registry code (never
# by models, prompts or tenant code). "SECRETS" in the name makes Django's error pages redact it.
AGENT_PLATFORM_ENV_SECRETS = env.agent_platform_env()
# The operator's provider keys as platform credentials (agents.credentials): usable by a
# tenant only when granted (PLATFORM_CREDENTIALS_GRANTED is the default of the per-tenant
# toggle), and only with the official endpoint or a base URL listed here.
PLATFORM_PROVIDER_CREDENTIALS_SECRETS = env.platform_provider_credentials()
PLATFORM_CREDENTIALS_GRANTED = env.platform_credentials_granted()
PROVIDER_BASE_URLS_ALLOWED = env.provider_base_urls_allowed()
# The demo agents' model per provider (OPENAI_MODEL, ANTHROPIC_MODEL): seed_demo_agents.
DEMO_MODEL_IDS = env.demo_model_ids()

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "corsheaders",
    "axes",
    "tenancy",
    "agents",
    "usage",
    "connectors",
    "threads",
    "retention",
    "compaction",
    "replay",
    "audit",
    "observability",
    "interop",
    "console",
    "sandbox",
]
if not env.is_production():
    # The demo tenant's function tools (agents/demo/agent_tools.py).
    INSTALLED_APPS.append("agents.demo")
# Extensions (docs/registry.md): the Django apps among the modules that installed packages
# declare in the entry-point group standard_agents_platform.extensions or PLATFORM_APPS names;
# discovery imports the others when the apps are ready.
PLATFORM_APPS = env.platform_apps()
INSTALLED_APPS += [app for app in extension_apps(PLATFORM_APPS) if app not in INSTALLED_APPS]

MIDDLEWARE = [
    # Operations first, so each covers the whole request: its server span
    # (observability.propagation; not in the chain when tracing is off), its HTTP metrics by
    # route template, and its id (X-Request-ID) on every line it logs and on its answer.
    "observability.propagation.traced_requests",
    "observability.metrics_http.http_metrics",
    "observability.logs.RequestIds",
    # Then CORS, so every /api/ answer carries its headers (it reads only Origin and the
    # path, and runs on the event loop).
    "corsheaders.middleware.CorsMiddleware",
    # Then: it answers a bad Host, path or query under /api/ in JSON before any other
    # middleware reads them (CommonMiddleware would answer a bad Host with an HTML page).
    "common.api.api_url_check",
    # A read waits briefly for a database connection while PostgreSQL is unreachable.
    "common.middleware.database_reads_fail_fast",
    # Django's and WhiteNoise's middleware, run on the event loop under ASGI instead of
    # through a thread per hook (common.middleware).
    "common.middleware.Security",
    "common.middleware.StaticFiles",
    "common.middleware.Sessions",
    "common.middleware.Common",
    "common.middleware.Csrf",
    "common.middleware.Authentication",
    # The admin's pages act in the system context "admin" for staff users (tenancy.wall).
    "tenancy.wall.admin_system_scope",
    "common.middleware.Messages",
    "common.middleware.FrameOptions",
    # Last: turns a login that axes refused into the lockout page (tenancy.logins); it only
    # reads a flag the login sets, on the event loop.
    "axes.middleware.AxesMiddleware",
]
# Browser pages on these origins may call /api/ (preflights answered, the platform's own
# request and response headers allowed and exposed); none by default.
CORS_ALLOWED_ORIGINS = env.cors_allowed_origins()
CORS_URLS_REGEX = r"^/api/.*$"
CORS_ALLOW_HEADERS = (*default_cors_headers, "idempotency-key", "x-request-id")
CORS_EXPOSE_HEADERS = ["X-Request-ID", "Idempotent-Replayed", "Retry-After",
                       "Content-Disposition", "Content-Range", "Accept-Ranges"]  # fmt: skip

# Django's checks that look for its middleware by path (ours subclass it); common.checks
# runs them, and those that depend on that middleware, against what ours stand for.
SILENCED_SYSTEM_CHECKS = ["security.W001", "security.W002", "security.W003"]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": _database(env.database_url())}
# The tenant wall (common.tenant_wall): the application's role (DATABASE_URL) owns no table
# and is subject to row-level security; migrations connect as the owner when
# DATABASE_MIGRATE_URL names one (tenancy's migrate command; docs/operations.md).
_MIGRATE_URL = env.database_migrate_url()
DATABASE_OWNER = _database(_MIGRATE_URL, "DATABASE_MIGRATE_URL") if _MIGRATE_URL else None
DATABASE_APPLICATION_ROLE = DATABASES["default"]["USER"]
TENANT_WALL_STRICT = env.tenant_wall_strict()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.redis_url()

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "platform:cache",
    }
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # A socket's channel buffers up to 1000 messages (events arrive in bursts); beyond
        # that the layer drops, and the socket fills the gap from the event log.
        "CONFIG": {"hosts": [REDIS_URL], "prefix": "platform:asgi", "capacity": 1000},
    }
}

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
# A flow survives a lost broker connection (its thread's lock and fence keep it the only one):
# it keeps running rather than being cancelled and redelivered (config.celery).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_POOL = "threads"
CELERY_WORKER_CONCURRENCY = env.celery_concurrency()
CELERY_TASK_DEFAULT_QUEUE = env.celery_queue()
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Riding through a Redis restart: workers reconnect for as long as it takes, a broker call
# fails within seconds instead of hanging, and publishing a wake-up retries briefly (past
# that, the caller logs it and the sweeper wakes the thread: threads.services.wakeups).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# Reconnecting (worker, beat, publishers) waits 0.5 s, then 1, 1.5, then 2 s between tries for
# as long as Redis is down (config.celery.BrokerConnection), so a flow resumes within a
# try plus a sweep (THREAD_SWEEP_INTERVAL_S) of Redis's return, whatever the outage's length.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_timeout": 5, "socket_connect_timeout": 2,
    "interval_start": 0.5, "interval_step": 0.5, "interval_max": 2.0,
}  # fmt: skip
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5,
}  # fmt: skip
CELERY_TIMEZONE = "UTC"
THREAD_SWEEP_INTERVAL_S = env.thread_sweep_interval_s()
THREAD_SWEEP_GRACE_S = env.thread_sweep_grace_s()
# Actions (threads.services.actions): how long a person has to decide by default, and how
# often beat resolves the expired ones.
ACTION_TTL_S = env.action_ttl_s()
ACTION_SWEEP_INTERVAL_S = env.action_sweep_interval_s()
# Scheduled effects (threads.services.effects): the ETA horizon and the sweep.
EFFECT_ETA_HORIZON_S = env.effect_eta_horizon_s()
EFFECT_SWEEP_INTERVAL_S = env.effect_sweep_interval_s()
EFFECT_SWEEP_GRACE_S = env.effect_sweep_grace_s()
# Egress (common.egress): what calls to tenant-chosen URLs (model base URLs, webhooks) may
# reach although it is not public; nothing by default.
EGRESS_ALLOWED_NETWORKS: list[str] = env.egress_allowed_networks()
EGRESS_ALLOWED_HOSTS: list[str] = env.egress_allowed_hosts()
# Webhooks (threads.services.webhooks; env.webhook_settings says what each is).
_webhooks = env.webhook_settings()
WEBHOOK_ALLOW_HTTP: bool = _webhooks["WEBHOOK_ALLOW_HTTP"]
WEBHOOK_TIMEOUT_S: int = _webhooks["WEBHOOK_TIMEOUT_S"]
WEBHOOK_MAX_ATTEMPTS: int = _webhooks["WEBHOOK_MAX_ATTEMPTS"]
WEBHOOK_RETRY_BASE_S: float = _webhooks["WEBHOOK_RETRY_BASE_S"]
WEBHOOK_RETRY_MAX_S: int = _webhooks["WEBHOOK_RETRY_MAX_S"]
WEBHOOK_DISABLE_AFTER: int = _webhooks["WEBHOOK_DISABLE_AFTER"]
WEBHOOK_SECRET_OVERLAP_S: int = _webhooks["WEBHOOK_SECRET_OVERLAP_S"]
WEBHOOK_CACHE_S: float = _webhooks["WEBHOOK_CACHE_S"]
# Watched processes (docs/operations.md): beat's leader lease (a standby takes over once it
# lapses), how long a duty with nothing to do goes unsent at most (common.duties), and the
# life of a worker's heartbeat key (observability.workers).
BEAT_LEADER_LEASE_S = env.beat_leader_lease_s()
BEAT_IDLE_MAX_S = env.beat_idle_max_s()
WORKER_HEARTBEAT_TTL_S = env.worker_heartbeat_ttl_s()
CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "sweep-threads": {"task": "threads.sweep_threads", "schedule": THREAD_SWEEP_INTERVAL_S},
    "expire-actions": {"task": "threads.expire_actions", "schedule": ACTION_SWEEP_INTERVAL_S},
    "sweep-effects": {"task": "threads.sweep_effects", "schedule": EFFECT_SWEEP_INTERVAL_S},
    "prune-effects": {"task": "threads.prune_effects", "schedule": 3600.0},
    "fire-schedules": {"task": "threads.fire_schedules", "schedule": EFFECT_SWEEP_INTERVAL_S},
    "sweep-webhooks": {"task": "threads.sweep_webhooks", "schedule": EFFECT_SWEEP_INTERVAL_S},
}
# Retention (retention.prune, docs/retention.md): the default of each tenant's policy in
# days (0: keep forever; a tenant's RetentionPolicy row overrides each), and how the beat task
# deletes: at most RETENTION_BATCH_ROWS rows per statement and RETENTION_MAX_BATCHES
# statements of each kind per run, so a backlog drains over several runs and no statement
# holds its locks for long.
_retention = env.retention_settings()
RETENTION_EVENTS_DAYS = _retention["RETENTION_EVENTS_DAYS"]
RETENTION_LOGS_DAYS = _retention["RETENTION_LOGS_DAYS"]
RETENTION_WEBHOOK_DELIVERIES_DAYS = _retention["RETENTION_WEBHOOK_DELIVERIES_DAYS"]
RETENTION_FINISHED_TURNS_DAYS = _retention["RETENTION_FINISHED_TURNS_DAYS"]
RETENTION_TERMINATED_THREADS_DAYS = _retention["RETENTION_TERMINATED_THREADS_DAYS"]
RETENTION_PRUNE_INTERVAL_S = _retention["RETENTION_PRUNE_INTERVAL_S"]
RETENTION_BATCH_ROWS = 1000
RETENTION_MAX_BATCHES = 100
CELERY_BEAT_SCHEDULE["retention-prune"] = {
    "task": "retention.prune", "schedule": float(RETENTION_PRUNE_INTERVAL_S),
}  # fmt: skip
# The audit trail (audit.prune, docs/audit.md) keeps entries this many days (0: forever),
# for every tenant, pruned in the same batches on the retention task's interval.
RETENTION_AUDIT_DAYS = env.retention_audit_days()
CELERY_BEAT_SCHEDULE["audit-prune"] = {
    "task": "audit.prune", "schedule": float(RETENTION_PRUNE_INTERVAL_S),
}  # fmt: skip
# Flows one tenant may run at once across every worker (threads.runtime.driver: counted
# thread locks); the rest of its threads wait, queued, and are woken as its flows end.
FLOWS_PER_TENANT = env.flows_per_tenant()
# A thread's lock (threads.services.lock) expires this long after its holder stops renewing.
THREAD_LOCK_TTL_MS = env.thread_lock_ttl_ms()
# Subagents (threads.runtime.subagents): tree depth, live children per thread, how long a
# blocking call waits, how long a variable-bootstrap request stays open.
SUBAGENT_MAX_DEPTH = env.subagent_max_depth()
SUBAGENT_MAX_CHILDREN = env.subagent_max_children()
SUBAGENT_WAIT_S = env.subagent_wait_s()
VARIABLE_REQUEST_TTL_S = env.variable_request_ttl_s()
# run_code (threads.services.code): warm runner processes per process, and code tools' budget.
SANDBOX_POOL_SIZE = env.sandbox_pool_size()
# OS limits of each runner process (sandbox.confine): CPU seconds per call, address space.
SANDBOX_CPU_LIMIT_S = env.sandbox_cpu_limit_s()
SANDBOX_ADDRESS_SPACE_MB = env.sandbox_address_space_mb()
CODE_TOOL_TIMEOUT_S = env.code_tool_timeout_s()
# Flows' sandbox calls (code tools, code-mode programs): how many one tenant runs at once
# across every worker (Redis leases; the rest wait their turn, in order), and how long one
# waits for its start (its turn, then a free runner) before it fails as sandbox_busy.
SANDBOX_TENANT_CONCURRENCY = env.sandbox_tenant_concurrency()
SANDBOX_WAIT_S = env.sandbox_wait_s()
# POST …/run-code (threads.api.code): calls one tenant may run at once cluster-wide (Redis
# leases), and how long a call waits for a free runner of its process before a 503.
RUN_CODE_TENANT_CONCURRENCY = env.run_code_tenant_concurrency()
RUN_CODE_RUNNER_WAIT_S = env.run_code_runner_wait_s()

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# collectstatic's output; only production-style (DEBUG off) serving reads it.
STATIC_ROOT = None if DEBUG else env.static_root()
# WhiteNoise serves static files from the ASGI server: straight from the apps in
# DEBUG, from `manage.py collectstatic` output (compressed, hashed) otherwise.
STORAGES = {
    "default": env.file_storage(),
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG
# WhiteNoise streams files through synchronous iterators, which Django under ASGI
# reads in a worker thread and warns about on every asset; for static files that
# cost is expected, so the warning is noise.
warnings.filterwarnings(
    "ignore", message="StreamingHttpResponse must consume synchronous iterators"
)
MEDIA_ROOT = env.media_root()

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenancy.authentication.ApiKeyAuthentication",
        "tenancy.authentication.TenantSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["tenancy.permissions.HasTenantRole"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["common.drf.CheckedJSONParser"],
    "DEFAULT_METADATA_CLASS": "common.drf.RouteMetadata",
    "DEFAULT_PAGINATION_CLASS": "common.pagination.CursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "common.schema.AutoSchema",
    "EXCEPTION_HANDLER": "common.api.exception_handler",
    # API requests per minute per tenant and per key (usage.quotas), after authentication.
    "DEFAULT_THROTTLE_CLASSES": ["usage.throttles.QuotaThrottle"],
    "UNAUTHENTICATED_USER": None,
    # ?format= is ours to use (bundle export); every API answer is JSON anyway.
    "URL_FORMAT_OVERRIDE": None,
}
# Request bodies Django reads into memory; bundles are capped at 5 MiB on top of this.
DATA_UPLOAD_MAX_MEMORY_SIZE = 6 * 1024 * 1024
# Seconds a request body may stall (no new piece) before it is a 408 (common.body_timeout).
REQUEST_BODY_TIMEOUT_S = env.request_body_timeout_s()

SPECTACULAR_SETTINGS = {
    "TITLE": "Standard Agents Platform API",
    "DESCRIPTION": "Define agents and run them on durable threads.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # 3.1 speaks JSON Schema 2020-12, which the pydantic definition documents use.
    "OAS_VERSION": "3.1.0",
    "ENUM_NAME_OVERRIDES": {
        "TenantRoleEnum": "tenancy.models.Role.choices",
        "MessageRoleEnum": "threads.models.MessageRole.choices",
        "QueueableRoleEnum": "threads.services.inbox.QUEUEABLE_ROLES",
        "AgentTypeEnum": "agents.models.AgentType.values",  # the documents use its values
        "EnvTypeEnum": ["text", "secret"],  # threads.services.env.EnvTypeName
        "PermissionDecisionEnum": "agents.permissions.DECISIONS",
        "CredentialProviderEnum": "agents.models.CredentialProvider.choices",
        "ModelProviderEnum": "agents.models.ProviderKind.values",  # the documents use its values
        "ActionDecisionEnum": "threads.services.actions.ANSWERS",
        "AuditActionEnum": "audit.api.ACTIONS",
        "ActionEnum": "threads.models.ScheduleAction.choices",  # a schedule's, named as before
        "RunStatusEnum": "threads.models.RunStatus.choices",
        "TurnKindEnum": "threads.models.TurnKind.choices",
        "TurnStrategyEnum": "threads.models.TurnStrategy.choices",
        "TurnSourceEnum": "threads.models.TurnSource.choices",
        "VariableRequestStatusEnum": ["pending", "completed", "expired"],  # expired: read-time
    },
}

SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
# The console's login (Django's auth views); the admin keeps its own.
LOGIN_URL = "console:login"
LOGIN_REDIRECT_URL = "console:threads"
# Failed console and admin logins (tenancy.logins, docs/security.md#authentication-throttling):
# counted per (account, client address) and per address by django-axes, which refuses a
# locked login before checking its password.
_logins = env.login_throttle_settings()
LOGIN_FAILURES_PER_ACCOUNT = _logins["LOGIN_FAILURES_PER_ACCOUNT"]
LOGIN_FAILURES_PER_ADDRESS = _logins["LOGIN_FAILURES_PER_ADDRESS"]
LOGIN_LOCKOUT_S = _logins["LOGIN_LOCKOUT_S"]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "tenancy.logins.LoginThrottleHandler"
# Axes counts (username, address) pairs; the higher per-address limit is the handler's.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = LOGIN_FAILURES_PER_ACCOUNT
AXES_COOLOFF_TIME = dt.timedelta(seconds=LOGIN_LOCKOUT_S)
AXES_RESET_ON_SUCCESS = True
# A refused attempt is not counted, so the wait the lockout page names is the wait.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_CLIENT_IP_CALLABLE = "tenancy.logins.login_client_address"
AXES_LOCKOUT_CALLABLE = "tenancy.logins.lockout_response"
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False  # no banner at every process start; failures still log a warning
# tenancy.lockouts_admin registers the attempts for superusers only.
AXES_ENABLE_ADMIN = False
# Failed API-key authentications (tenancy.throttling): Redis counters in fixed windows.
_api_keys = env.api_key_throttle_settings()
API_KEY_FAILURES_PER_ADDRESS = _api_keys["API_KEY_FAILURES_PER_ADDRESS"]
API_KEY_FAILURES_PER_PREFIX = _api_keys["API_KEY_FAILURES_PER_PREFIX"]
API_KEY_FAILURE_WINDOW_S = _api_keys["API_KEY_FAILURE_WINDOW_S"]
# Quotas (usage.quotas; env.usage_quota_settings says what each is): rate limits per tenant
# and per API key, 0 = unlimited; a tenant's TenantQuota row (admin) overrides each.
_quotas = env.usage_quota_settings()
USAGE_REQUESTS_PER_MINUTE = _quotas["USAGE_REQUESTS_PER_MINUTE"]
USAGE_KEY_REQUESTS_PER_MINUTE = _quotas["USAGE_KEY_REQUESTS_PER_MINUTE"]
USAGE_TURNS_PER_MINUTE = _quotas["USAGE_TURNS_PER_MINUTE"]
USAGE_TOKENS_PER_MINUTE = _quotas["USAGE_TOKENS_PER_MINUTE"]
USAGE_TOKENS_PER_DAY = _quotas["USAGE_TOKENS_PER_DAY"]
# Budgets (usage.budgets, docs/usage.md): a call's worst-case output when neither the request
# nor the model caps it; the smallest answer worth reserving for (below it the budget has no
# room); how long a call waits for other calls' reservations to settle before its turn pauses.
USAGE_DEFAULT_MAX_OUTPUT_TOKENS = 4096
USAGE_MIN_OUTPUT_TOKENS = 16
USAGE_RESERVE_WAIT_S = 30.0
if env.is_production():
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        # LOG_FORMAT=json: one JSON object a line with the ids of the work (observability.logs).
        "json": {"()": "observability.logs.JsonFormatter"},
    },
    # Beat's sweeps (every second or two) log at DEBUG, and a Redis outage says so once per
    # kind of line, at WARNING: config.logs.
    "filters": {
        "periodic": {"()": "config.logs.PeriodicTasksAtDebug"},
        "redis_outage": {"()": "config.logs.RedisOutageOnce"},
        "ids": {"()": "observability.logs.LogIds"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if env.log_format() == "json" else "plain",
            "filters": ["ids"],
        }
    },
    "root": {"handlers": ["console"], "level": env.log_level()},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # Django's default handler (DEBUG only) wrote each of its lines a second time, bare;
        # its mail handler has no ADMINS to write to. Its lines go to the root's handler.
        "django": {"handlers": [], "level": "INFO"},
        # uvicorn and runserver give their loggers handlers of their own: JSON lines go
        # through ours (their level stays uvicorn's --log-level).
        **{
            name: {"handlers": ["console"], "propagate": False}
            for name in ("uvicorn", "uvicorn.access", "django.server")
            if env.log_format() == "json"
        },
        **{
            name: {"filters": ["periodic"]}
            for name in ("celery.worker.strategy", "celery.app.trace")
        },
        "celery.beat": {"filters": ["periodic", "redis_outage"]},
        **{
            name: {"filters": ["redis_outage"]}
            for name in (
                "celery.worker.request",  # "Couldn't ack" (kombu logs it here)
                "celery.worker.consumer.consumer",
                "threads.broadcast",
                "threads.services.heartbeat",
                "threads.services.wakeups",
                "usage.quotas",
            )
        },
    },
}
