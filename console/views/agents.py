"""The console's agents pages: the tenant's definitions by kind, one definition viewed,
edited, created or deleted, a bundle imported (a dry run first) or exported, and the
registry's tools, hooks and effects. Writes go through the services the API uses
(``definition_save``, ``definition_delete``, ``bundle_import``), so they validate the
whole definition graph the same way; a refusal is shown at the field its path names."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from pydantic import BaseModel

from agents.api import registry_effects_json, registry_hooks_json, registry_tools_json
from agents.auditing import bundle_imported_audit, definition_saved_audit
from agents.bundles import (
    Format,
    ImportReport,
    bundle_dump,
    bundle_export,
    bundle_import,
    bundle_parse,
)
from agents.documents import LIFECYCLE_TOOLS
from agents.models import DEFINITION_MODELS, Agent, CodeTool, Definition, Model, Prompt
from agents.registry import current_registry
from agents.services import (
    KEEP,
    definition_delete,
    definition_save,
    definitions_snapshot,
    document_json,
    parse_document,
    row_document,
)
from agents.validation import KINDS, SINGULAR, Kind
from common.audit import AuditAction
from common.errors import DomainError
from connectors.models import A2aAgent, McpServer
from console.agent_forms import BundleForm, DefinitionForm, DefinitionJsonForm
from console.definition_fields import Pickers
from console.scope import console_of, console_view
from console.views.common import page
from tenancy.auditing import audit_by
from tenancy.models import Tenant

TITLES: dict[str, str] = {
    "models": "Models",
    "prompts": "Prompts",
    "agents": "Agents",
    "code_tools": "Code tools",
}
# A bundle entry's path: ``prompts[2]`` (and what follows it, ``prompts[2].tools[0]``).
ENTRY_PATH = re.compile(r"^(?P<kind>[a-z_]+)\[(?P<index>\d+)\]")


def _kind(kind: str) -> Kind:
    """``kind`` as a definition kind; anything else is a 404."""
    for known in KINDS:
        if known == kind:
            return known
    raise Http404(f"no kind of definition named {kind!r}")


def _definition(tenant: Tenant, kind: Kind, name: str) -> Definition:
    """The tenant's definition; another tenant's (or none) is a 404, as in the API."""
    row = DEFINITION_MODELS[kind].objects.for_tenant(tenant).filter(name=name).first()
    if row is None:
        raise Http404(f"no {SINGULAR[kind]} named {name!r}")
    return row


def _summary(row: Definition) -> str:
    """A line saying what a definition is, for the index."""
    if isinstance(row, Model):
        return f"{row.provider} · {row.model_id}"
    if isinstance(row, Prompt):
        return f"model {row.model}"
    if isinstance(row, Agent):
        return f"{row.get_type_display()} · side A: {row.side_a.get('prompt', '')}"
    if isinstance(row, CodeTool):
        return row.language
    return ""


# The index ---------------------------------------------------------------------------------


@require_GET
@console_view()
def agents_index(request: HttpRequest) -> HttpResponse:
    """The tenant's definitions, a table per kind, each linking to its page."""
    tenant = console_of(request).principal.tenant
    kinds = [
        {
            "kind": kind, "title": TITLES[kind], "singular": SINGULAR[kind],
            "rows": [
                {"row": row, "summary": _summary(row)}
                for row in DEFINITION_MODELS[kind].objects.for_tenant(tenant).order_by("name")
            ],
        }
        for kind in KINDS
    ]  # fmt: skip
    return page(request, "console/agents/index.html", {"kinds": kinds, "nav": "agents"})


# One definition ----------------------------------------------------------------------------


DefinitionInput = DefinitionForm | DefinitionJsonForm


def _pickers(tenant: Tenant) -> Pickers:
    """What the definition forms offer to pick from, for ``tenant``: its models and prompts;
    for a prompt's tools, the registry's tools, its code tools, prompts, agents, MCP servers
    (each, and each tool of their cached listing) and A2A agents, and the lifecycle tools;
    the registry's hooks."""
    view = current_registry().visible_to(tenant.slug)

    def names(model: type[Definition]) -> list[str]:
        return list(
            model.objects.for_tenant(tenant).order_by("name").values_list("name", flat=True)
        )

    prompts, mcp = names(Prompt), McpServer.objects.for_tenant(tenant).order_by("name")
    tools = [
        *[(name, "registry tool") for name in sorted(view.tools)],
        *[(name, "code tool") for name in names(CodeTool)],
        *[(name, "prompt") for name in prompts],
        *[(name, "agent") for name in names(Agent)],
        *[(f"mcp:{server.name}", "every tool of an MCP server") for server in mcp],
        *[(f"mcp:{server.name}/{tool['name']}", "MCP tool")
          for server in mcp for tool in server.tools or () if isinstance(tool, dict)],
        *[(f"a2a:{name}", "A2A agent") for name in
          A2aAgent.objects.for_tenant(tenant).order_by("name").values_list("name", flat=True)],
        *[(name, "subagent lifecycle tool") for name in sorted(LIFECYCLE_TOOLS)],
    ]  # fmt: skip
    return Pickers(
        models=tuple(names(Model)), prompts=tuple(prompts), tools=tuple(tools),
        hooks=tuple((entry.id, str(entry.hook)) for entry in view.hooks.values()),
    )  # fmt: skip


def _form(
    request: HttpRequest, kind: Kind, initial: dict[str, Any] | None = None
) -> DefinitionInput:
    """The definition form the request asks for: the structured one, or (``view=json``) the
    whole document as JSON, bound to the posted data on a POST."""
    data = request.POST if request.method == "POST" else None
    if (request.POST if data is not None else request.GET).get("view") == "json":
        document = None if initial is None else {"document": initial}
        return DefinitionJsonForm(data, kind=kind, initial=document)
    tenant = console_of(request).principal.tenant
    structured = None if initial is None else DefinitionForm.initial_from(kind, initial)
    return DefinitionForm(data, kind=kind, pickers=_pickers(tenant), initial=structured)


def _save(
    request: HttpRequest, form: DefinitionInput, row: Definition | None
) -> HttpResponse | None:
    """Save what ``form`` says through ``definition_save`` over ``row`` (None: a new one),
    audited as the API audits it; the redirect to the saved definition, or None with the
    refusal added to the form."""
    principal = console_of(request).principal
    if not form.is_valid():
        return None
    current = None if row is None else row.name
    before = {} if row is None else document_json(row_document(row))
    try:
        doc = parse_document(form.kind, form.document_data())
        api_key = form.api_key()
        with transaction.atomic():
            saved = definition_save(
                tenant=principal.tenant, kind=form.kind, doc=doc, current_name=current,
                api_key=api_key,
            )  # fmt: skip
            definition_saved_audit(
                principal, kind=form.kind, current=current, before=before, row=saved.row,
                api_key_changed=api_key is not KEEP,
            )  # fmt: skip
    except DomainError as error:
        form.add_domain_error(error, name=form.definition_name(current))
        return None
    messages.success(request, f"Saved {SINGULAR[form.kind]} {saved.row.name}.")
    for warning in saved.warnings:
        messages.warning(request, f"Warning: {warning.describe()}")
    return redirect("console:agents-definition", kind=form.kind, name=saved.row.name)


def _definition_page(
    request: HttpRequest, form: DefinitionInput, row: Definition | None
) -> HttpResponse:
    document = document_json(row_document(row), omit_none=True) if row is not None else {}
    fields = DEFINITION_MODELS[form.kind].DOCUMENT.model_fields
    shown, folded = form.sections() if isinstance(form, DefinitionForm) else ([], [])
    return page(
        request, "console/agents/definition.html",
        {
            "form": form, "kind": form.kind, "singular": SINGULAR[form.kind], "row": row,
            "view": "json" if isinstance(form, DefinitionJsonForm) else "form",
            "shown_sections": shown, "folded_sections": folded,
            "folded_open": any(section.invalid for section in folded),
            "shown": [_shown(name, document.get(name)) for name in fields],
            "has_api_key": isinstance(row, Model) and row.has_api_key, "nav": "agents",
        },
    )  # fmt: skip


def _shown(name: str, value: object) -> dict[str, Any]:
    """A field's value as a reader sees it: text as it is, anything else as JSON."""
    if value is None:
        return {"name": name, "text": "(not set)", "block": False}
    if isinstance(value, str):
        return {"name": name, "text": value, "block": "\n" in value}
    return {"name": name, "text": _json(value), "block": isinstance(value, dict | list)}


def _json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@require_http_methods(["GET", "POST"])
@console_view()
def definition_detail(request: HttpRequest, kind: str, name: str) -> HttpResponse:
    """A definition: its fields as a form for writers (saved through ``definition_save``,
    as ``PUT /api/v1/<kind>/<name>`` does), as a list of values for readers."""
    known = _kind(kind)
    row = _definition(console_of(request).principal.tenant, known, name)
    if request.method == "POST":
        form = _form(request, known)
        saved = _save(request, form, row)
        if saved is not None:
            return saved
    else:
        form = _form(request, known, document_json(row_document(row), omit_none=True))
    return _definition_page(request, form, row)


@require_http_methods(["GET", "POST"])
@console_view(write=True)
def definition_new(request: HttpRequest, kind: str) -> HttpResponse:
    """Create a definition of ``kind`` (as ``POST /api/v1/<kind>`` does)."""
    known = _kind(kind)
    if request.method == "POST":
        form = _form(request, known)
        saved = _save(request, form, None)
        if saved is not None:
            return saved
    else:
        form = _form(request, known, _defaults(known))
    return _definition_page(request, form, None)


def _defaults(kind: Kind) -> dict[str, Any]:
    """The document's defaults, as a new definition's form starts."""
    fields = DEFINITION_MODELS[kind].DOCUMENT.model_fields
    found = {
        name: info.get_default(call_default_factory=True)
        for name, info in fields.items()
        if not info.is_required()
    }
    return {name: value.model_dump(mode="json") if isinstance(value, BaseModel) else value
            for name, value in found.items() if value is not None}  # fmt: skip


@require_POST
@console_view(write=True)
def definition_delete_view(request: HttpRequest, kind: str, name: str) -> HttpResponse:
    """Delete a definition (``definition_delete``: refused while others refer to it)."""
    known = _kind(kind)
    principal = console_of(request).principal
    row = _definition(principal.tenant, known, name)
    try:
        with transaction.atomic():
            definition_delete(tenant=principal.tenant, kind=known, name=row.name)
            audit_by(principal, AuditAction.DEFINITION_DELETED, SINGULAR[known], row.name)
    except DomainError as error:
        messages.error(request, error.message)
        return redirect("console:agents-definition", kind=known, name=row.name)
    messages.success(request, f"Deleted {SINGULAR[known]} {row.name}.")
    return redirect("console:agents")


# Bundles ------------------------------------------------------------------------------------


def _entries(
    document: object, errors: Sequence[Mapping[str, str]], warnings: Sequence[Mapping[str, str]]
) -> list[dict[str, Any]]:
    """The bundle's definition entries in order, each with the errors and warnings whose
    path is in it (``prompts[0].model`` is in ``prompts[0]``)."""
    entries = []
    lists = document if isinstance(document, Mapping) else {}
    for kind in KINDS:
        items = lists.get(kind)
        for index, item in enumerate(items if isinstance(items, list) else []):
            name = item.get("name") if isinstance(item, Mapping) else None
            at = f"{kind}[{index}]"
            entries.append(
                {"path": at, "kind": kind, "singular": SINGULAR[kind],
                 "name": name if isinstance(name, str) else "",
                 "errors": [e for e in errors if _entry_of(e["path"]) == at],
                 "warnings": [w for w in warnings if _entry_of(w["path"]) == at]}
            )  # fmt: skip
    return entries


def _entry_of(problem_path: str) -> str | None:
    """The entry a problem's path is in (``prompts[0]``), or None (``version``)."""
    found = ENTRY_PATH.match(problem_path)
    return found.group(0) if found is not None else None


def _outcome(entry: Mapping[str, Any], report: ImportReport) -> str:
    """What the import would do with an entry, from a dry run's report."""
    label = f"{entry['singular']} {entry['name']}"
    for outcome, labels in (
        ("would be created", report.created),
        ("would be updated", report.updated),
        ("unchanged", report.unchanged),
    ):
        if label in labels:
            return outcome
    return ""


def _existing(tenant: Tenant) -> dict[str, set[str]]:
    """The names the tenant's definitions have, by kind."""
    return {
        kind: set(DEFINITION_MODELS[kind].objects.for_tenant(tenant).values_list("name", flat=True))
        for kind in KINDS
    }


def _import_page(
    request: HttpRequest, form: BundleForm, result: dict[str, Any] | None = None
) -> HttpResponse:
    return page(
        request, "console/agents/import.html", {"form": form, "result": result, "nav": "agents"}
    )


@require_http_methods(["GET", "POST"])
@console_view(write=True)
def bundle_import_view(request: HttpRequest) -> HttpResponse:
    """Import a bundle (``POST /api/v1/bundles``). A pasted or uploaded bundle is always
    checked first (``dry_run``): what it would create and update, and every error at its
    entry. Only the Apply button (``apply``, carrying the same text) imports it."""
    principal = console_of(request).principal
    tenant = principal.tenant
    if request.method == "GET":
        return _import_page(request, BundleForm())
    form = BundleForm(request.POST, request.FILES)
    applying = request.POST.get("apply") == "1"
    if not form.is_valid():
        return _import_page(request, form)
    replace = bool(form.cleaned_data["replace"])
    try:
        text = form.text()
        document = bundle_parse(text)
    except DomainError as error:
        form.add_error(error.field if error.field in form.fields else None, error.message)
        return _import_page(request, form)
    form = BundleForm(initial={"document": text, "replace": replace})
    shared = {"text": text, "replace": replace, "applying": applying}
    try:
        with transaction.atomic():
            before = definitions_snapshot(tenant=tenant) if applying else None
            report = bundle_import(tenant=tenant, document=document, dry_run=not applying,
                                   replace=replace)  # fmt: skip
            if before is not None:
                after = definitions_snapshot(tenant=tenant)
                bundle_imported_audit(
                    principal, before=before, after=after, report=report, replace=replace
                )
    except DomainError as error:
        return _import_page(request, form, shared | _refusal(tenant, document, error))
    if applying:
        messages.success(request, _applied(report))
        return redirect("console:agents")
    return _import_page(request, form, shared | _checked(document, report))


def _refusal(tenant: Tenant, document: object, error: DomainError) -> dict[str, Any]:
    """A refused bundle: each error at its entry (the others apart), and whether each
    entry names a definition the tenant has."""
    problems = error.details if isinstance(error.details, list) else []
    errors = problems or [{"path": error.field or "", "message": error.message}]
    existing = _existing(tenant)
    entries = _entries(document, errors, [])
    for entry in entries:
        entry["outcome"] = "exists" if entry["name"] in existing[entry["kind"]] else "new"
    general = [e for e in errors if _entry_of(e["path"]) is None]
    return {"errors": errors, "warnings": [], "entries": entries, "general": general}


def _checked(document: object, report: ImportReport) -> dict[str, Any]:
    """A dry run's report: what would happen to each entry, with its warnings."""
    entries = _entries(document, [], report.warnings)
    for entry in entries:
        entry["outcome"] = _outcome(entry, report)
    general = [w for w in report.warnings if _entry_of(w["path"]) is None]
    return {
        "errors": [], "warnings": report.warnings, "entries": entries, "general": general,
        "deleted": report.deleted,
    }  # fmt: skip


def _applied(report: ImportReport) -> str:
    parts = [
        f"{verb} {', '.join(labels)}"
        for verb, labels in (
            ("created", report.created), ("updated", report.updated), ("deleted", report.deleted)
        )
        if labels
    ]  # fmt: skip
    return "Imported the bundle: " + ("; ".join(parts) if parts else "nothing changed") + "."


@require_GET
@console_view()
def bundle_export_view(request: HttpRequest) -> HttpResponse:
    """The tenant's bundle as a download (``GET /api/v1/bundles``; never API keys), JSON
    or, with ``?format=yaml``, YAML."""
    tenant = console_of(request).principal.tenant
    fmt: Format = "yaml" if request.GET.get("format") == "yaml" else "json"
    body = bundle_dump(bundle_export(tenant=tenant), fmt)
    content_type = "application/yaml" if fmt == "yaml" else "application/json"
    answer = HttpResponse(body, content_type=f"{content_type}; charset=utf-8")
    answer["Content-Disposition"] = f'attachment; filename="{tenant.slug}-bundle.{fmt}"'
    return answer


# The registry -------------------------------------------------------------------------------


@require_GET
@console_view()
def registry_page(request: HttpRequest) -> HttpResponse:
    """The registry's tools, hooks and effects this tenant may use, each as the registry
    API routes give them (``GET /api/v1/registry/{tools,hooks,effects}``)."""
    view = current_registry().visible_to(console_of(request).principal.tenant.slug)
    return page(
        request, "console/agents/registry.html",
        {
            "tools": _with_schema_text(registry_tools_json(view)),
            "hooks": registry_hooks_json(view),
            "effects": _with_schema_text(registry_effects_json(view)),
            "nav": "agents",
        },
    )  # fmt: skip


def _with_schema_text(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{**entry, "args_schema_text": _json(entry["args_schema"])} for entry in entries]


DEFINITION = "agents/<str:kind>/<str:name>/"

urlpatterns = [
    path("agents/", agents_index, name="agents"),
    path("agents/import/", bundle_import_view, name="agents-import"),
    path("agents/export/", bundle_export_view, name="agents-export"),
    path("agents/registry/", registry_page, name="agents-registry"),
    path("agents/new/<str:kind>/", definition_new, name="agents-new"),
    path(DEFINITION, definition_detail, name="agents-definition"),
    path(DEFINITION + "delete/", definition_delete_view, name="agents-delete"),
]
