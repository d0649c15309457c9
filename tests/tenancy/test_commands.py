"""Management commands: create_tenant, create_api_key, revoke_api_key, seed_demo."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from pytest_django.fixtures import Settings

from tenancy.models import ApiKey, Membership, Role, Tenant
from tenancy.services import api_key_authenticate

pytestmark = pytest.mark.django_db


def _run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_tenant_makes_a_tenant_with_a_data_key() -> None:
    out, _ = _run("create_tenant", "initech", "--name", "Initech")

    tenant = Tenant.objects.get(slug="initech")
    assert tenant.name == "Initech"
    assert bytes(tenant.data_key_wrapped).startswith(b"K1")
    assert out.startswith("Created tenant initech")


@pytest.mark.parametrize("slug", ["Bad Slug", "x-", "x" * 64])
def test_create_tenant_refuses_bad_slugs(slug: str) -> None:
    with pytest.raises(CommandError, match="slug must be"):
        _run("create_tenant", slug)


def test_create_tenant_refuses_duplicates(tenant: Tenant) -> None:
    with pytest.raises(CommandError, match="already exists"):
        _run("create_tenant", "acme")


def test_create_api_key_prints_a_working_key_once(tenant: Tenant) -> None:
    out, err = _run("create_api_key", "--tenant", "acme", "--name", "ops", "--role", "read_only")

    secret = out.strip()
    api_key = api_key_authenticate(raw_key=secret)
    assert api_key.tenant_id == tenant.id
    assert api_key.role == Role.READ_ONLY
    assert "not shown again" in err
    assert secret not in err
    assert api_key.secret_hash not in secret


def test_create_api_key_with_expiry_in_days(tenant: Tenant) -> None:
    _run("create_api_key", "--tenant", "acme", "--name", "temp", "--expires", "30d")

    api_key = ApiKey.objects.get(name="temp")
    assert api_key.expires_at is not None
    assert 29 <= (api_key.expires_at - api_key.created_at).days <= 30


def test_create_api_key_for_unknown_tenant_fails_clearly() -> None:
    with pytest.raises(CommandError, match="no tenant with slug 'nope'"):
        _run("create_api_key", "--tenant", "nope", "--name", "x")


@pytest.mark.parametrize("form", ["id", "prefix", "full"])
def test_revoke_api_key_by_id_prefix_or_full_key(tenant: Tenant, form: str) -> None:
    secret, _ = _run("create_api_key", "--tenant", "acme", "--name", "x")
    secret = secret.strip()
    api_key = ApiKey.objects.get(name="x")
    ident = {"id": str(api_key.id), "prefix": f"sap_{api_key.prefix}", "full": secret}[form]

    out, _ = _run("revoke_api_key", ident)

    assert ApiKey.objects.get(id=api_key.id).revoked is True
    assert out.startswith(f"Revoked key {api_key.id}")


@pytest.mark.parametrize(
    "ident", ["not-a-uuid", "sap_zzzzzzzzzzzz", "0190a1b2-0000-7000-8000-000000000000"]
)
def test_revoke_api_key_of_unknown_key_fails_clearly(ident: str) -> None:
    with pytest.raises(CommandError):
        _run("revoke_api_key", ident)


def test_seed_demo_is_idempotent_and_keeps_credentials(settings: Settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path

    first = json.loads(_run("seed_demo", "--json")[0])
    second = json.loads(_run("seed_demo", "--json")[0])

    assert first == second
    assert Tenant.objects.filter(slug="demo").count() == 1
    assert ApiKey.objects.filter(tenant__slug="demo").count() == 1
    assert api_key_authenticate(raw_key=first["api_key"]).role == Role.ADMIN
    assert Membership.objects.get(tenant__slug="demo", user__username="admin").role == Role.ADMIN
    assert (tmp_path / "demo.json").stat().st_mode & 0o777 == 0o600


def test_seed_demo_replaces_a_revoked_demo_key(settings: Settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    first = json.loads(_run("seed_demo", "--json")[0])
    ApiKey.objects.filter(tenant__slug="demo").update(revoked=True)

    second = json.loads(_run("seed_demo", "--json")[0])

    assert second["api_key"] != first["api_key"]
    assert api_key_authenticate(raw_key=second["api_key"]).tenant.slug == "demo"


def test_seed_demo_prints_the_api_key_line(settings: Settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path

    out, _ = _run("seed_demo")

    key_lines = [line for line in out.splitlines() if line.startswith("API key: ")]
    assert len(key_lines) == 1
    assert api_key_authenticate(raw_key=key_lines[0].removeprefix("API key: "))


def test_seed_demo_refuses_production(settings: Settings) -> None:
    settings.PLATFORM_MODE = "production"

    with pytest.raises(CommandError, match="not in production"):
        _run("seed_demo")
