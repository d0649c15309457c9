from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from common.crypto import Keyring, encode_key, generate_key
from config import env
from config.launcher import web_options

# Every variable config.env reads.
ENV_VARS = (
    "PLATFORM_MODE",
    "PLATFORM_VAR_DIR",
    "DEBUG",
    "ALLOWED_HOSTS",
    "CSRF_TRUSTED_ORIGINS",
    "CORS_ALLOWED_ORIGINS",
    "PLATFORM_RUNTIME_ID",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "METRICS_TOKEN",
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "METRICS_TENANT_LABEL",
    "PROMETHEUS_MULTIPROC_DIR",
    "HOST",
    "PORT",
    "CELERY_CONCURRENCY",
    "CELERY_QUEUE",
    "FLOWS_PER_TENANT",
    "SANDBOX_TENANT_CONCURRENCY",
    "SANDBOX_WAIT_S",
    "WEB_PROCESSES",
    "THREAD_SWEEP_GRACE_S",
    "WS_COMPRESSION",
    "BROWSER_TESTS",
    "WEBHOOK_ALLOW_HTTP",
    "EGRESS_ALLOWED_NETWORKS",
    "EGRESS_ALLOWED_HOSTS",
    "DB_POOL_SIZE",
    "STATIC_ROOT",
    "MEDIA_ROOT",
    "FILE_STORAGE",
    "S3_BUCKET",
    "S3_ENDPOINT_URL",
    "S3_REGION",
    "S3_ACCESS_KEY_ID",
    "S3_SECRET_ACCESS_KEY",
    "SECRET_KEY",
    "PLATFORM_ENCRYPTION_KEYS",
    "DATABASE_URL",
    "DATABASE_MIGRATE_URL",
    "TENANT_WALL_STRICT",
    "REDIS_URL",
    "AGENT_PLATFORM_ENV",
    "PLATFORM_APPS",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_MODEL",
    "ANTHROPIC_MODEL",
    "PLATFORM_CREDENTIALS_GRANTED",
    "PROVIDER_BASE_URLS_ALLOWED",
)

PRODUCTION_KEY = "k" * 50
PREPARE_RUNS = 6  # one more than psycopg needs before it prepares a statement


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty environment whose var dir is a fresh temporary directory."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    var = tmp_path / "var"
    monkeypatch.setenv("PLATFORM_VAR_DIR", str(var))
    return var


def _set_production(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_MODE", "production")
    monkeypatch.setenv("SECRET_KEY", PRODUCTION_KEY)
    monkeypatch.setenv("PLATFORM_ENCRYPTION_KEYS", encode_key(generate_key()))
    monkeypatch.setenv("DATABASE_URL", "postgresql://app:pw@db.internal:5432/platform")
    monkeypatch.setenv("REDIS_URL", "redis://cache.internal:6379/0")
    monkeypatch.setenv("ALLOWED_HOSTS", "agents.example.com")


def test_the_fixture_clears_every_variable_env_reads() -> None:
    source = Path(env.__file__).read_text()
    read = set(re.findall(r'(?:_get|_bool|_list|_service_url)\("([A-Z_]+)"', source))

    assert read
    assert read <= set(ENV_VARS)


# Modes -----------------------------------------------------------------------------


def test_mode_defaults_to_development() -> None:
    assert env.mode() == "development"
    assert env.is_production() is False
    assert env.debug() is True


def test_mode_is_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_MODE", "Production")

    assert env.mode() == "production"
    assert env.debug() is False


def test_invalid_mode_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_MODE", "staging")

    with pytest.raises(ImproperlyConfigured, match="PLATFORM_MODE") as caught:
        env.mode()

    assert "'staging'" in str(caught.value)


# Production guard --------------------------------------------------------------------


def test_production_with_nothing_set_names_every_missing_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLATFORM_MODE", "production")

    with pytest.raises(ImproperlyConfigured) as caught:
        env.check_production()

    message = str(caught.value)
    assert message.startswith("Refusing to start: ")
    for name in ("SECRET_KEY", "PLATFORM_ENCRYPTION_KEYS", "DATABASE_URL", "REDIS_URL"):
        assert f"{name} is required in production" in message
    assert "ALLOWED_HOSTS is required in production" in message
    assert "DEBUG" not in message  # DEBUG defaults to false in production


def test_production_names_only_the_missing_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    _set_production(monkeypatch)
    monkeypatch.delenv("REDIS_URL")
    monkeypatch.setenv("ALLOWED_HOSTS", "")

    with pytest.raises(ImproperlyConfigured) as caught:
        env.check_production()

    assert str(caught.value) == (
        "Refusing to start: REDIS_URL is required in production; "
        "ALLOWED_HOSTS is required in production"
    )


def test_production_refuses_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    _set_production(monkeypatch)
    monkeypatch.setenv("DEBUG", "true")

    with pytest.raises(ImproperlyConfigured) as caught:
        env.check_production()

    assert str(caught.value) == "Refusing to start: DEBUG must be false in production"


def test_production_refuses_a_short_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    _set_production(monkeypatch)
    monkeypatch.setenv("SECRET_KEY", "k" * 49)

    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY must be at least 50 characters"):
        env.check_production()


def test_production_with_everything_set_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    _set_production(monkeypatch)
    monkeypatch.setenv("DEBUG", "false")

    env.check_production()

    assert env.is_production() is True
    assert env.debug() is False
    assert env.secret_key() == PRODUCTION_KEY
    assert env.database_url() == "postgresql://app:pw@db.internal:5432/platform"
    assert env.redis_url() == "redis://cache.internal:6379/0"
    assert env.allowed_hosts() == ["agents.example.com"]


def test_development_skips_the_production_guard() -> None:
    env.check_production()  # nothing set, DEBUG on: fine outside production

    assert env.debug() is True


def test_production_does_not_generate_secrets(
    monkeypatch: pytest.MonkeyPatch, clean_env: Path
) -> None:
    monkeypatch.setenv("PLATFORM_MODE", "production")

    with pytest.raises(ImproperlyConfigured, match=r"^SECRET_KEY is required in production$"):
        env.secret_key()
    with pytest.raises(
        ImproperlyConfigured, match=r"^PLATFORM_ENCRYPTION_KEYS is required in production$"
    ):
        env.encryption_keys()

    assert not (clean_env / "secrets.json").exists()


# Development secrets ----------------------------------------------------------------


def test_development_secrets_are_generated_once_and_private(clean_env: Path) -> None:
    path = clean_env / "secrets.json"
    assert not path.exists()

    key = env.secret_key()

    assert path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) >= 50
    keys = env.encryption_keys()
    assert len(keys) == 1
    assert len(Keyring.from_strings(keys).keys[0]) == 32
    assert json.loads(path.read_text()) == {"secret_key": key, "encryption_keys": keys}

    written = path.read_bytes()
    assert env.secret_key() == key
    assert env.encryption_keys() == keys
    assert path.read_bytes() == written


def test_encryption_keys_alone_generate_the_secrets_file(clean_env: Path) -> None:
    keys = env.encryption_keys()

    stored = json.loads((clean_env / "secrets.json").read_text())
    assert stored["encryption_keys"] == keys
    assert env.secret_key() == stored["secret_key"]


def test_each_var_dir_gets_its_own_secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first = env.secret_key()
    monkeypatch.setenv("PLATFORM_VAR_DIR", str(tmp_path / "other"))

    assert env.secret_key() != first


def test_configured_secrets_win_and_nothing_is_generated(
    monkeypatch: pytest.MonkeyPatch, clean_env: Path
) -> None:
    first, second = encode_key(generate_key()), encode_key(generate_key())
    monkeypatch.setenv("SECRET_KEY", "from-the-environment")
    monkeypatch.setenv("PLATFORM_ENCRYPTION_KEYS", f" {first} , {second},")

    assert env.secret_key() == "from-the-environment"
    assert env.encryption_keys() == [first, second]
    assert not (clean_env / "secrets.json").exists()


# Service URLs --------------------------------------------------------------------------


def _record_services(var: Path, **urls: str) -> None:
    var.mkdir(parents=True, exist_ok=True)
    (var / "services.json").write_text(json.dumps(urls))


def test_development_falls_back_to_the_embedded_servers(clean_env: Path) -> None:
    _record_services(
        clean_env,
        database_url="postgresql://postgres@127.0.0.1:55432/platform",
        redis_url="redis://127.0.0.1:56379/0",
    )

    assert env.database_url() == "postgresql://postgres@127.0.0.1:55432/platform"
    assert env.redis_url() == "redis://127.0.0.1:56379/0"
    assert env.configured_service_urls() == {"DATABASE_URL": None, "REDIS_URL": None}


def test_configured_urls_win_over_the_embedded_servers(
    monkeypatch: pytest.MonkeyPatch, clean_env: Path
) -> None:
    _record_services(clean_env, database_url="postgresql://postgres@127.0.0.1:55432/platform")
    monkeypatch.setenv("DATABASE_URL", "postgresql://app@db.internal/platform")

    assert env.database_url() == "postgresql://app@db.internal/platform"
    assert env.configured_service_urls()["DATABASE_URL"] == "postgresql://app@db.internal/platform"


def test_production_ignores_the_embedded_servers(
    monkeypatch: pytest.MonkeyPatch, clean_env: Path
) -> None:
    _record_services(
        clean_env,
        database_url="postgresql://postgres@127.0.0.1:55432/platform",
        redis_url="redis://127.0.0.1:56379/0",
    )
    monkeypatch.setenv("PLATFORM_MODE", "production")

    with pytest.raises(ImproperlyConfigured, match=r"^DATABASE_URL is not set"):
        env.database_url()
    with pytest.raises(ImproperlyConfigured, match=r"^REDIS_URL is not set"):
        env.redis_url()


def test_missing_database_url_names_the_variable_and_the_services_file(
    clean_env: Path,
) -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        env.database_url()

    message = str(caught.value)
    assert message.startswith("DATABASE_URL is not set")
    assert str(clean_env / "services.json") in message
    assert "python -m config.devservices up" in message


def test_a_service_missing_from_the_services_file_is_not_set(clean_env: Path) -> None:
    _record_services(clean_env, database_url="postgresql://postgres@127.0.0.1:55432/platform")

    assert env.database_url() == "postgresql://postgres@127.0.0.1:55432/platform"
    with pytest.raises(ImproperlyConfigured, match=r"^REDIS_URL is not set"):
        env.redis_url()


# Other values ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("TRUE", True),
        (" yes ", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        ("", False),
    ],
)
def test_debug_accepts_the_usual_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("DEBUG", raw)

    assert env.debug() is expected


def test_invalid_debug_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUG", "maybe")

    with pytest.raises(ImproperlyConfigured) as caught:
        env.debug()

    assert str(caught.value) == "DEBUG must be true or false, got 'maybe'"


def test_web_bind_defaults_and_reads_host_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env.web_bind() == ("127.0.0.1", 8000)

    monkeypatch.setenv("HOST", "192.0.2.10")
    monkeypatch.setenv("PORT", "9001")

    assert env.web_bind() == ("192.0.2.10", 9001)


@pytest.mark.parametrize("raw", ["http", "80a", "-1", "8000.0"])
def test_invalid_port_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("PORT", raw)

    with pytest.raises(ImproperlyConfigured) as caught:
        env.web_bind()

    assert str(caught.value) == f"PORT must be a number, got {raw!r}"


def test_celery_concurrency_must_be_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env.celery_concurrency() == 256
    monkeypatch.setenv("CELERY_CONCURRENCY", "3")
    assert env.celery_concurrency() == 3

    monkeypatch.setenv("CELERY_CONCURRENCY", "0")

    with pytest.raises(ImproperlyConfigured, match="CELERY_CONCURRENCY"):
        env.celery_concurrency()


def test_flows_per_tenant_defaults_to_all_but_an_eighth_of_the_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert env.flows_per_tenant() == 224
    monkeypatch.setenv("CELERY_CONCURRENCY", "8")
    assert env.flows_per_tenant() == 7
    monkeypatch.setenv("CELERY_CONCURRENCY", "1")
    assert env.flows_per_tenant() == 1
    monkeypatch.setenv("FLOWS_PER_TENANT", "3")
    assert env.flows_per_tenant() == 3


def test_web_sockets_are_not_compressed_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert web_options()[-2:] == ["--ws-per-message-deflate", "false"]
    monkeypatch.setenv("WS_COMPRESSION", "true")

    assert web_options()[-2:] == ["--ws-per-message-deflate", "true"]


def test_the_web_runs_one_process_per_cpu_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    options = web_options()
    assert options[options.index("--workers") + 1] == str(os.cpu_count() or 1)
    monkeypatch.setenv("WEB_PROCESSES", "3")
    options = web_options()
    assert options[options.index("--workers") + 1] == "3"
    monkeypatch.setenv("WEB_PROCESSES", "0")
    with pytest.raises(ImproperlyConfigured, match="WEB_PROCESSES"):
        web_options()


def test_celery_queue_defaults_to_celerys_own(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env.celery_queue() == "celery"
    monkeypatch.setenv("CELERY_QUEUE", "acme-prod")

    assert env.celery_queue() == "acme-prod"


def test_db_pool_size_must_be_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env.db_pool_size() == 20
    monkeypatch.setenv("DB_POOL_SIZE", "5")
    assert env.db_pool_size() == 5

    monkeypatch.setenv("DB_POOL_SIZE", "0")

    with pytest.raises(ImproperlyConfigured) as caught:
        env.db_pool_size()

    assert str(caught.value) == "DB_POOL_SIZE must be a positive number, got '0'"


def test_static_root_defaults_under_the_var_dir(
    monkeypatch: pytest.MonkeyPatch, clean_env: Path, tmp_path: Path
) -> None:
    assert env.static_root() == clean_env / "static"

    monkeypatch.setenv("STATIC_ROOT", str(tmp_path / "collected"))

    assert env.static_root() == tmp_path / "collected"


def test_allowed_hosts_default_to_local_names_and_split_on_commas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert env.allowed_hosts() == ["localhost", "127.0.0.1", "[::1]", "testserver"]

    monkeypatch.setenv("ALLOWED_HOSTS", "a.example.com, b.example.com ,")

    assert env.allowed_hosts() == ["a.example.com", "b.example.com"]


def test_var_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, clean_env: Path) -> None:
    assert env.var_dir() == clean_env
    assert env.services_file() == clean_env / "services.json"

    monkeypatch.delenv("PLATFORM_VAR_DIR")

    assert env.var_dir() == env.REPO_DIR / "var"


def test_child_environment_adds_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_RUNTIME_ID", "runtime-7")

    child = env.child_environment({"DATABASE_URL": "postgresql://x@h/db"})

    assert child["PLATFORM_RUNTIME_ID"] == "runtime-7"
    assert child["DATABASE_URL"] == "postgresql://x@h/db"


# Agent platform env ----------------------------------------------------------------


def test_agent_platform_env_passes_nothing_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's provider keys are platform credentials, never platform env values."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-1")
    monkeypatch.setenv("UNRELATED_SECRET", "nope")

    assert env.agent_platform_env() == {}


def test_platform_apps_default_to_none_and_split_on_commas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert env.platform_apps() == []

    monkeypatch.setenv("PLATFORM_APPS", " weather_tools.tools, billing ,,")
    assert env.platform_apps() == ["weather_tools.tools", "billing"]


def test_agent_platform_env_follows_its_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_PLATFORM_ENV", "COMPANY, OPENAI_API_KEY")
    monkeypatch.setenv("COMPANY", "Acme")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "not listed")

    assert env.agent_platform_env() == {"COMPANY": "Acme"}


def test_platform_provider_credentials_come_from_the_provider_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert env.platform_provider_credentials() == {}
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")

    assert env.platform_provider_credentials() == {
        "openai": {"api_key": env.LOCAL_SERVER_KEY, "base_url": "http://127.0.0.1:11434/v1"},
        "anthropic": {"api_key": "sk-ant", "base_url": None},
    }
    assert env.provider_base_urls_allowed() == []  # a credential's own URL is its own
    monkeypatch.setenv("PROVIDER_BASE_URLS_ALLOWED", "https://gw.example/v1, https://b.example")
    assert env.provider_base_urls_allowed() == ["https://gw.example/v1", "https://b.example"]
    assert env.platform_credentials_granted() is False


# Egress allow-lists ----------------------------------------------------------------


def test_egress_allows_nothing_by_default_in_every_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (env.egress_allowed_networks(), env.egress_allowed_hosts()) == ([], [])
    _set_production(monkeypatch)
    assert (env.egress_allowed_networks(), env.egress_allowed_hosts()) == ([], [])


def test_egress_allow_lists_are_read_and_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGRESS_ALLOWED_NETWORKS", "127.0.0.1/32, 10.0.0.0/8,::1, fd00::/8")
    monkeypatch.setenv("EGRESS_ALLOWED_HOSTS", "LLM.internal., *.corp.example")

    assert env.egress_allowed_networks() == ["127.0.0.1/32", "10.0.0.0/8", "::1/128", "fd00::/8"]
    assert env.egress_allowed_hosts() == ["llm.internal", "*.corp.example"]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("EGRESS_ALLOWED_NETWORKS", "10.0.0.1/8", "EGRESS_ALLOWED_NETWORKS must list networks"),
        ("EGRESS_ALLOWED_NETWORKS", "intranet", "got 'intranet'"),
        ("EGRESS_ALLOWED_HOSTS", "*", "EGRESS_ALLOWED_HOSTS must list host names"),
        ("EGRESS_ALLOWED_HOSTS", "llm.*.internal", "got 'llm.*.internal'"),
        ("EGRESS_ALLOWED_HOSTS", "10.0.0.0/8", "got '10.0.0.0/8'"),
    ],
)
def test_a_malformed_egress_allow_list_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)

    read = {
        "EGRESS_ALLOWED_NETWORKS": env.egress_allowed_networks,
        "EGRESS_ALLOWED_HOSTS": env.egress_allowed_hosts,
    }[name]

    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        read()


# File storage ----------------------------------------------------------------------


def test_file_storage_defaults_to_the_filesystem() -> None:
    assert env.file_storage() == {"BACKEND": "django.core.files.storage.FileSystemStorage"}


def test_s3_file_storage_needs_a_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FILE_STORAGE", "s3")

    with pytest.raises(ImproperlyConfigured, match="S3_BUCKET is required"):
        env.file_storage()


def test_s3_file_storage_passes_its_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FILE_STORAGE", "S3")
    monkeypatch.setenv("S3_BUCKET", "threads")
    monkeypatch.setenv("S3_ENDPOINT_URL", "http://127.0.0.1:9000")

    assert env.file_storage() == {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": "threads",
            "file_overwrite": False,
            "endpoint_url": "http://127.0.0.1:9000",
        },
    }


def test_unknown_file_storage_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FILE_STORAGE", "ftp")

    with pytest.raises(ImproperlyConfigured, match="FILE_STORAGE must be"):
        env.file_storage()


def test_statements_are_bound_server_side_and_prepared_unless_the_url_says_not() -> None:
    from config.settings import PREPARE_THRESHOLD, _database

    prepared = _database("postgresql://app@db:5432/platform")["OPTIONS"]
    plain = _database("postgresql://app@db:5432/platform?server_side_binding=false")["OPTIONS"]

    assert (prepared["server_side_binding"], prepared["prepare_threshold"]) == (
        True, PREPARE_THRESHOLD,
    )  # fmt: skip
    assert (plain["server_side_binding"], plain["prepare_threshold"]) == (False, None)


def test_this_process_prepares_what_it_runs_often(db: None) -> None:
    from django.db import connection

    for _ in range(PREPARE_RUNS):
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM django_migrations WHERE app = %s", ["threads"])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%django_migrations WHERE app = $1%"],
        )
        assert cursor.fetchone()[0] == 1


# Authentication throttling ----------------------------------------------------------

THROTTLE_VARS = (
    "LOGIN_FAILURES_PER_ACCOUNT", "LOGIN_FAILURES_PER_ADDRESS", "LOGIN_LOCKOUT_S",
    "API_KEY_FAILURES_PER_ADDRESS", "API_KEY_FAILURES_PER_PREFIX", "API_KEY_FAILURE_WINDOW_S",
)  # fmt: skip


def test_authentication_throttling_defaults_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in THROTTLE_VARS:
        monkeypatch.delenv(name, raising=False)
    assert env.login_throttle_settings() == {
        "LOGIN_FAILURES_PER_ACCOUNT": 5, "LOGIN_FAILURES_PER_ADDRESS": 50, "LOGIN_LOCKOUT_S": 900,
    }  # fmt: skip
    assert env.api_key_throttle_settings() == {
        "API_KEY_FAILURES_PER_ADDRESS": 30, "API_KEY_FAILURES_PER_PREFIX": 10,
        "API_KEY_FAILURE_WINDOW_S": 60,
    }  # fmt: skip

    monkeypatch.setenv("LOGIN_FAILURES_PER_ADDRESS", "200")
    monkeypatch.setenv("API_KEY_FAILURE_WINDOW_S", "300")

    assert env.login_throttle_settings()["LOGIN_FAILURES_PER_ADDRESS"] == 200
    assert env.api_key_throttle_settings()["API_KEY_FAILURE_WINDOW_S"] == 300


@pytest.mark.parametrize("name", THROTTLE_VARS)
def test_authentication_throttling_limits_must_be_positive(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "0")
    login = name.startswith("LOGIN")
    reader = env.login_throttle_settings if login else env.api_key_throttle_settings

    with pytest.raises(ImproperlyConfigured, match=name):
        reader()
