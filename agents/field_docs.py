"""What each field of a definition document means, for the people who write definitions:
the docstring under the field in :mod:`agents.documents`, shown by the API schema and the
console's forms.

The docstrings are read from that module's source once, when first asked for. (pydantic can
read them itself, ``use_attribute_docstrings``, but it does so at each class's creation by
searching every loaded module, which cost every process a second and a half at start.)
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from pathlib import Path

from pydantic import BaseModel

from agents import documents


def field_doc(model: type[BaseModel], name: str) -> str:
    """The documentation of ``model``'s field ``name`` (the first of its classes in
    :mod:`agents.documents` to document it); empty when none does."""
    docs = _docs()
    for klass in model.__mro__:
        if klass.__module__ == documents.__name__:
            found = docs.get(klass.__name__, {}).get(name)
            if found:
                return found
    return ""


@functools.cache
def _docs() -> dict[str, dict[str, str]]:
    """Each class of :mod:`agents.documents` by name: its fields' docstrings by field name."""
    tree = ast.parse(Path(inspect.getfile(documents)).read_text(encoding="utf-8"))
    found: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields = found.setdefault(node.name, {})
        for statement, following in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                fields[statement.target.id] = re.sub(
                    r"\s*\n\s*", " ", following.value.value.strip()
                )
    return found
