"""Bundles: one YAML or JSON document holding a tenant's definitions.

::

    version: 1
    models:     [ {name: fast, provider: openai, model_id: gpt-4o-mini, ...}, ... ]
    prompts:    [ ... ]
    agents:     [ ... ]
    code_tools: [ ... ]

Import upserts by name (``replace`` also deletes the tenant's definitions the
bundle does not hold) and is atomic: every problem is reported with its path in
the document (``prompts[2].tools[0]``) and nothing changes unless there are
none. Export never contains API keys; a model entry may carry ``api_key`` on
import, which is stored encrypted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import yaml
from django.db import transaction
from pydantic import ValidationError

from agents.documents import Strict, error_paths
from agents.models import DEFINITION_MODELS, Model
from agents.services import (
    DefinitionInvalid,
    definitions_check,
    definitions_snapshot,
    document_json,
    document_values,
    lock_definitions,
    model_api_key_set,
    row_document,
)
from agents.validation import KINDS, SINGULAR, DefinitionSet, Kind, Problem
from common.errors import LimitExceeded
from common.parsing import document_parse
from common.payloads import NodeLimit
from common.time import now
from tenancy.models import Tenant

BUNDLE_VERSION = 1
MAX_BUNDLE_BYTES = 5 * 1024 * 1024
# Values in one bundle, keys included. A definition holds about 25 (a large schema a few
# hundred), so this is room for some two thousand; it keeps each walk of a bundle (the YAML
# parse, about 12 µs a value, the checks, the validation) well under a second.
MAX_BUNDLE_NODES = 50_000
BUNDLE_NODES = NodeLimit(count=MAX_BUNDLE_NODES, name="MAX_BUNDLE_NODES", subject="the bundle")
Format = Literal["yaml", "json"]


def bundle_parse(raw: bytes | str) -> object:
    """A YAML or JSON bundle as plain data, bounded while it is parsed
    (:func:`common.parsing.document_parse`): at most MAX_BUNDLE_BYTES (LimitExceeded, 413),
    no YAML alias, at most MAX_DEPTH levels and BUNDLE_NODES values (ValidationFailed, 400,
    naming the limit and where it was hit). A bundle within them costs every later walk
    (entry validation, reference checks) at most BUNDLE_NODES steps."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > MAX_BUNDLE_BYTES:
        limit = f"{MAX_BUNDLE_BYTES} bytes ({MAX_BUNDLE_BYTES // 2**20} MiB)"
        raise LimitExceeded(f"bundle is {size} bytes; the limit is {limit}")
    return document_parse(raw, nodes=BUNDLE_NODES)


class _Dumper(yaml.SafeDumper):
    """Never an anchor: a bundle with an alias is refused on import (common.parsing)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def bundle_dump(document: Mapping[str, Any], fmt: Format = "yaml") -> str:
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    dumped: str = yaml.dump(dict(document), Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    return dumped


@dataclass
class ImportReport:
    dry_run: bool
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Parsed:
    docs: dict[Kind, dict[str, tuple[int, Strict]]]
    api_keys: dict[str, str]
    errors: list[dict[str, str]]


def _parse_entries(document: object) -> _Parsed:
    parsed = _Parsed(docs={kind: {} for kind in KINDS}, api_keys={}, errors=[])

    def error(path: str, message: str) -> None:
        parsed.errors.append({"path": path, "message": message})

    if not isinstance(document, Mapping):
        error(
            "$", "a bundle is a mapping with the keys version, models, prompts, agents, code_tools"
        )
        return parsed
    for key in sorted(set(document) - {"version", *KINDS}):
        error(str(key), "unknown key; expected version, models, prompts, agents, code_tools")
    if document.get("version", BUNDLE_VERSION) != BUNDLE_VERSION:
        error(
            "version", f"unsupported bundle version; this platform reads version {BUNDLE_VERSION}"
        )
    for kind in KINDS:
        entries = document.get(kind) or []
        if not isinstance(entries, list):
            error(kind, "must be a list")
            continue
        for index, entry in enumerate(entries):
            path = f"{kind}[{index}]"
            if kind == "models" and isinstance(entry, Mapping) and "api_key" in entry:
                entry = dict(entry)
                key = entry.pop("api_key")
                if not isinstance(key, str) or not key.strip():
                    error(f"{path}.api_key", "must be a non-empty string")
                elif isinstance(entry.get("name"), str):
                    parsed.api_keys[entry["name"]] = key
            try:
                doc = DEFINITION_MODELS[kind].DOCUMENT.model_validate(entry)
            except ValidationError as failure:
                for sub_path, message in error_paths(failure, path):
                    error(sub_path, message)
                continue
            name = getattr(doc, "name")  # noqa: B009
            if name in parsed.docs[kind]:
                first = parsed.docs[kind][name][0]
                error(
                    f"{path}.name",
                    f"{SINGULAR[kind]} {name!r} is already defined at {kind}[{first}]",
                )
                continue
            parsed.docs[kind][name] = (index, doc)
    return parsed


def _problem_path(problem: Problem, parsed: _Parsed) -> str:
    located = parsed.docs[problem.kind].get(problem.name)
    if located is None:
        base = f"(existing {SINGULAR[problem.kind]} {problem.name!r})"
    else:
        base = f"{problem.kind}[{located[0]}]"
    if not problem.field:
        return base
    return f"{base}{problem.field}" if problem.field.startswith("[") else f"{base}.{problem.field}"


@transaction.atomic
def bundle_import(
    *, tenant: Tenant, document: object, dry_run: bool = False, replace: bool = False
) -> ImportReport:
    """Validate and (unless ``dry_run``) apply a bundle, all or nothing.

    Raises DefinitionInvalid carrying the report's errors (each with its path)
    when anything is wrong; nothing is written then.
    """
    lock_definitions(tenant=tenant)
    report = ImportReport(dry_run=dry_run)
    parsed = _parse_entries(document)
    report.errors.extend(parsed.errors)
    existing = definitions_snapshot(tenant=tenant)
    merged = (
        DefinitionSet(credentials=existing.credentials, remote_tools=existing.remote_tools)
        if replace
        else definitions_snapshot(tenant=tenant)
    )
    for kind in KINDS:
        target = merged.of(kind)
        for name, (_, doc) in parsed.docs[kind].items():
            target[name] = doc  # type: ignore[index]
    merged.keyed_models = {name for name in existing.keyed_models if name in merged.models} | set(
        parsed.api_keys
    )
    if not report.errors:  # references are checked once every entry parses
        for problem in definitions_check(tenant=tenant, definitions=merged):
            entry = {"path": _problem_path(problem, parsed), "message": problem.message}
            (report.errors if problem.severity == "error" else report.warnings).append(entry)
    if report.errors:
        first = report.errors[0]
        raise DefinitionInvalid(
            f"bundle has {len(report.errors)} error(s); first: {first['path']}: {first['message']}",
            details=report.errors,
        )
    _plan_and_apply(tenant=tenant, parsed=parsed, existing=existing, replace=replace, report=report)
    return report


def _plan_and_apply(
    *, tenant: Tenant, parsed: _Parsed, existing: DefinitionSet, replace: bool, report: ImportReport
) -> None:
    for kind in KINDS:
        model = DEFINITION_MODELS[kind]
        current = existing.of(kind)
        for name, (_, doc) in sorted(parsed.docs[kind].items()):
            label = f"{SINGULAR[kind]} {name}"
            new_key = parsed.api_keys.get(name) if kind == "models" else None
            if name not in current:
                report.created.append(label)
            elif current[name] != doc or new_key is not None:
                report.updated.append(label)
            else:
                report.unchanged.append(label)
                continue
            if report.dry_run:
                continue
            values, moment = document_values(doc), now()
            row, _ = model.objects.update_or_create(
                tenant=tenant, name=name, defaults={**values, "updated_at": moment},
                # One moment for both: a default created_at would come after updated_at.
                create_defaults={**values, "created_at": moment, "updated_at": moment},
            )  # fmt: skip
            if isinstance(row, Model) and new_key is not None:
                model_api_key_set(row=row, api_key=new_key)
        if replace:
            stale = sorted(set(current) - set(parsed.docs[kind]))
            report.deleted.extend(f"{SINGULAR[kind]} {name}" for name in stale)
            if not report.dry_run:
                model.objects.for_tenant(tenant).filter(name__in=stale).delete()


def bundle_export(*, tenant: Tenant) -> dict[str, Any]:
    """The tenant's definitions as a bundle document, in a stable order (never API keys)."""
    document: dict[str, Any] = {"version": BUNDLE_VERSION}
    for kind in KINDS:
        rows = DEFINITION_MODELS[kind].objects.for_tenant(tenant).order_by("name")
        document[kind] = [document_json(row_document(row), omit_none=True) for row in rows]
    return document
