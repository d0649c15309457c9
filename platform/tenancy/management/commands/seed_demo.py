from __future__ import annotations

import json
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from common.tenant_wall import system_scope
from tenancy.models import ApiKey, Role, Tenant
from tenancy.services import api_key_create, membership_set, tenant_create

DEMO_SLUG = "demo"
ADMIN_USERNAME = "admin"


class Command(BaseCommand):
    help = (
        "Development only: make sure the demo tenant, an admin user and a demo API key "
        "exist, and print their credentials. Safe to run again: it reuses what is there "
        "(credentials are kept in var/demo.json)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the credentials as JSON")

    @system_scope("command:seed_demo")  # an operator's command: every tenant's rows
    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PLATFORM_MODE == "production":
            raise CommandError("seed_demo creates well-known demo credentials; not in production")
        store = settings.VAR_DIR / "demo.json"
        saved: dict[str, str] = json.loads(store.read_text()) if store.exists() else {}
        with transaction.atomic():
            tenant = Tenant.objects.filter(slug=DEMO_SLUG).first() or tenant_create(
                slug=DEMO_SLUG, name="Demo tenant"
            )
            password = self._admin(tenant, saved.get("admin_password"))
            api_key = self._api_key(tenant, saved.get("api_key"))
        credentials = {
            "tenant": tenant.slug,
            "admin_user": ADMIN_USERNAME,
            "admin_password": password,
            "api_key": api_key,
        }
        store.parent.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(credentials, indent=2))
        store.chmod(0o600)
        if options["json"]:
            self.stdout.write(json.dumps(credentials))
            return
        self.stdout.write(f"Tenant:   {tenant.slug}")
        self.stdout.write(f"Admin:    {ADMIN_USERNAME} / {password}")
        self.stdout.write(f"API key: {api_key}")

    def _admin(self, tenant: Tenant, password: str | None) -> str:
        user_model = get_user_model()
        user = user_model.objects.filter(username=ADMIN_USERNAME).first()
        if user is None or password is None or not user.check_password(password):
            password = secrets.token_urlsafe(12)
            if user is None:
                user = user_model.objects.create_superuser(ADMIN_USERNAME, password=password)
            else:
                user.set_password(password)
                user.save(update_fields=["password"])
        membership_set(tenant=tenant, user=user, role=Role.ADMIN)
        return password

    def _api_key(self, tenant: Tenant, key: str | None) -> str:
        """The saved key while it still works, else a fresh one."""
        if key is not None:
            prefix = key.split("_")[1] if key.count("_") >= 2 else ""
            existing = ApiKey.objects.for_tenant(tenant).filter(prefix=prefix).first()
            if existing is not None and not existing.revoked and existing.expires_at is None:
                return key
        return api_key_create(tenant=tenant, name="demo", role=Role.ADMIN).secret
