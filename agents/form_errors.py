"""A definition service's refusal shown on a Django form (the admin's and the console's):
each problem at the field its path starts with (``side_a.prompt`` at ``side_a``), naming
the whole path; a problem of another definition at the top, naming that definition."""

from __future__ import annotations

import re

from django import forms

from common.errors import DomainError


def top_field(path: str) -> str:
    """The document field a problem's path starts with: ``tools[0].name`` -> ``tools``."""
    return re.split(r"[.\[]", path, maxsplit=1)[0]


def add_problem(form: forms.BaseForm, path: str, message: str) -> None:
    """``message`` at the field ``path`` starts with (naming the path), else at the top."""
    field = top_field(path)
    text = f"{path}: {message}" if path else message
    form.add_error(field if field in form.fields else None, text)


def add_definition_problems(
    form: forms.BaseForm, error: DomainError, *, kind: str, name: object
) -> bool:
    """Each problem in ``error.details`` on ``form``: those of the definition ``kind``
    (singular) ``name`` at their fields, the others at the top naming their definition.
    False when the error lists no problems (the caller shows its message)."""
    details = error.details if isinstance(error.details, list) else []
    for item in details:
        owner_kind, owner, path = item.get("kind"), item.get("name"), item.get("path") or ""
        if owner_kind is None or (owner_kind == kind and owner == name):
            add_problem(form, path, item["message"])
        else:
            where = f"{owner_kind} {owner!r}: " + (f"{path}: " if path else "")
            form.add_error(None, where + item["message"])
    return bool(details)
