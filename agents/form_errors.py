"""A definition service's refusal shown on a Django form (the admin's and the console's):
each problem at the deepest field its path names (``side_a.prompt`` at ``side_a-prompt`` in a
form with an input per key of a side, else at ``side_a``), naming the whole path; a problem
of another definition at the top, naming that definition."""

from __future__ import annotations

import re

from django import forms

from common.errors import DomainError


def field_of(form: forms.BaseForm, path: str) -> str | None:
    """The field of ``form`` a problem at ``path`` belongs to: the deepest one the path names,
    its parts joined by ``-`` (``tools[2].blocking`` at ``tools-2``, ``side_a.prompt`` at
    ``side_a-prompt``, else ``side_a``); None when the form has none (the top)."""
    parts = [part for part in re.split(r"[.\[\]]+", path) if part]
    for end in range(len(parts), 0, -1):
        name = "-".join(parts[:end])
        if name in form.fields:
            return name
    return None


def add_problem(form: forms.BaseForm, path: str, message: str) -> None:
    """``message`` at the field ``path`` names (naming the path), else at the top."""
    text = f"{path}: {message}" if path else message
    form.add_error(field_of(form, path), text)


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
