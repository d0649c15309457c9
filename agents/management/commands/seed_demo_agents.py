from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from agents.bundles import ImportReport, bundle_import
from agents.demo.bundle import (
    PlatformCredentials,
    demo_bundle,
    is_earlier_local_model,
    is_seeded_provider_model,
    is_seeded_scripted_model,
    relies_on_platform_env,
)
from agents.documents import ModelDoc, Strict
from agents.models import Model
from agents.selectors import model_load
from agents.services import definition_documents, document_json, model_api_key_set, parse_document
from agents.validation import KINDS, Kind
from common.errors import DomainError
from common.tenant_wall import system_scope
from tenancy.models import Tenant
from tenancy.selectors import tenant_get

DEMO_MODEL = "demo_model"
# What a bundle entry may carry that a stored definition never shows (bundle import takes it
# out before parsing): compared with the stored one, an entry is read without it.
_WRITE_ONLY: dict[str, tuple[str, ...]] = {"models": ("api_key",)}


class Command(BaseCommand):
    help = (
        "Development only: import the demo agents into a tenant (default: demo). Uses a real "
        "model when OPENAI_API_KEY / OPENAI_BASE_URL / ANTHROPIC_API_KEY is set (the operator's "
        "platform credential, granted to the tenant), else the scripted demo model. Safe to "
        "run again: what the tenant already has is kept (its edits too), except the demo "
        "model as a seed wrote it, which follows the configuration (the provider, "
        "OPENAI_MODEL / ANTHROPIC_MODEL), and a demo model that named a provider key in "
        "api_key_env or stored a local server's placeholder key, which moves to the platform "
        "credential; --reset restores every demo definition. Prints the model the demo "
        "tenant's agents use."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", default="demo", help="tenant slug (default: demo)")
        parser.add_argument(
            "--reset", action="store_true", help="overwrite the demo definitions the tenant has"
        )

    @system_scope("command:seed_demo_agents")  # an operator's command: every tenant's rows
    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PLATFORM_MODE == "production":
            raise CommandError("seed_demo_agents is for development; not in production")
        credentials = settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS
        bundle = demo_bundle(credentials, model_ids=settings.DEMO_MODEL_IDS)
        try:
            with transaction.atomic():
                tenant = tenant_get(slug=options["tenant"])
                if credentials and tenant.platform_credentials is None:
                    # The explicit grant the demo's real model needs (docs/providers.md).
                    tenant.platform_credentials = True
                    tenant.save(update_fields=["platform_credentials"])
                before = _demo_model(tenant)
                document, kept = (bundle, 0) if options["reset"] else _absent_only(tenant, bundle)
                if before is not None and any(
                    entry["name"] == DEMO_MODEL for entry in document["models"]
                ):
                    _forget_stored_key(tenant)
                report = bundle_import(tenant=tenant, document=document)
                stored = _demo_model(tenant)
        except DomainError as error:
            raise CommandError(error.message) from error
        configured = _comparable("models", bundle["models"][0])
        assert stored is not None  # the seed writes it when absent
        assert isinstance(configured, ModelDoc)
        names = ", ".join(sorted(entry["name"] for entry in bundle["agents"]))
        self.stdout.write(
            f"Demo agents: {names}; model: "
            f"{_model_line(stored, before, configured, credentials)}"
            f"; {_changes(report)}"
            + (f"; {kept} kept as the tenant has them (make demo-reset restores them)"
               if kept else "")
        )  # fmt: skip


def _changes(report: ImportReport) -> str:
    """What the seed wrote: definitions created (a first run) and changed (a later one)."""
    created, changed = len(report.created), len(report.updated)
    if created and changed:
        return f"{created} created, {changed} changed"
    return f"{created} created" if created else f"{changed} changed"


def _comparable(kind: Kind, entry: dict[str, Any]) -> Strict:
    """A demo entry as the stored definition it becomes (write-only fields left out)."""
    readable = {key: value for key, value in entry.items() if key not in _WRITE_ONLY.get(kind, ())}
    return parse_document(kind, readable)


def _demo_model(tenant: Tenant) -> ModelDoc | None:
    doc = definition_documents(tenant=tenant, kind="models").get(DEMO_MODEL)
    assert doc is None or isinstance(doc, ModelDoc)
    return doc


def _follows_configuration(tenant: Tenant, doc: ModelDoc) -> bool:
    """Whether the stored demo model is one a seed wrote and the tenant left alone, so it is
    replaced by the configured one."""
    if is_seeded_scripted_model(doc) or is_seeded_provider_model(doc):
        return True
    if relies_on_platform_env(doc):
        return True
    stored_key = (
        model_load(tenant=tenant, name=doc.name).api_key
        if doc.credential is None and doc.base_url is not None
        else None
    )
    return is_earlier_local_model(doc, stored_key=stored_key)


def _forget_stored_key(tenant: Tenant) -> None:
    """The demo model is about to be replaced by the demo's, which stores no key: a key stored
    on it (an earlier seed's placeholder for a local server) goes, as a model has one key
    source. Called inside the seed's transaction, so a failed import keeps it."""
    row = Model.objects.for_tenant(tenant).get(name=DEMO_MODEL)
    if row.api_key_encrypted is not None:
        model_api_key_set(row=row, api_key=None)


def _absent_only(tenant: Tenant, bundle: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The demo definitions the tenant lacks, plus the demo model when a seed wrote it and
    the tenant left it alone (it follows the configuration); and how many of the rest
    differ from the demo's (edited)."""
    document: dict[str, Any] = {"version": bundle["version"]}
    kept = 0
    for kind in KINDS:
        stored = definition_documents(tenant=tenant, kind=kind)
        entries = []
        for entry in bundle.get(kind, []):
            current = stored.get(entry["name"])
            if current is None or (
                kind == "models"
                and isinstance(current, ModelDoc)
                and _follows_configuration(tenant, current)
            ):
                entries.append(entry)
            elif document_json(current) != document_json(_comparable(kind, entry)):
                kept += 1  # the tenant's edit
        document[kind] = entries
    return document, kept


def _model_line(
    stored: ModelDoc,
    before: ModelDoc | None,
    configured: ModelDoc,
    credentials: PlatformCredentials,
) -> str:
    """What the demo's agents call, from the stored model: a model that changed names the
    one it replaced; one the tenant changed, kept, names the configured one it was not
    replaced with and how to apply it."""
    line = _label(stored, credentials)
    if before is not None and document_json(before) != document_json(stored):
        line += f" (was {_label(before, credentials)})"
    if document_json(stored) != document_json(configured):
        line += (
            f" (kept as the tenant changed it; the configuration asks for "
            f"{_label(configured, credentials)}: make demo-reset applies it)"
        )
    return line


def _label(doc: ModelDoc, credentials: PlatformCredentials) -> str:
    if doc.provider == "scripted":
        return "scripted" + ("" if credentials else " (no provider key configured)")
    endpoint = doc.base_url
    if endpoint is None and doc.credential == f"platform:{doc.provider}":
        endpoint = credentials.get(doc.provider, {}).get("base_url")
    return f"{doc.provider} {doc.model_id}" + (f" at {endpoint}" if endpoint else "")
