"""What a request body may hold: values JSON can carry and PostgreSQL can store.

Parsed input is walked once (without recursion) before anything reads it: nesting deeper
than :data:`MAX_DEPTH`, a NUL character, a lone surrogate and a non-finite number are each
refused with a ValidationFailed naming where they are (``metadata.a[2]``), so they become a
400 instead of an error deep in a parser, a serializer or the database.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from common.errors import ValidationFailed

MAX_DEPTH = 64


def payload_check(value: Any, *, path: str = "") -> None:
    """Raise ValidationFailed for the first value ``value`` holds that the platform cannot
    take (see the module docstring); ``path`` prefixes the field named."""
    for where, item, depth in _walk(value, path):
        if depth > MAX_DEPTH:
            raise ValidationFailed(
                f"nested more than {MAX_DEPTH} levels deep (the limit MAX_DEPTH)",
                field=where or None,
            )
        problem = _problem(item)
        if problem is not None:
            raise ValidationFailed(problem, field=where or None)


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any, int]]:
    stack: list[tuple[str, Any, int]] = [(path, value, 0)]
    while stack:
        where, item, depth = stack.pop()
        yield where, item, depth
        if depth >= MAX_DEPTH + 1:
            continue
        if isinstance(item, Mapping):
            for key, child in reversed(list(item.items())):
                name = str(key)
                yield where, name, depth  # keys are strings to check too
                stack.append((f"{where}.{name}" if where else name, child, depth + 1))
        elif isinstance(item, list | tuple):
            for index in reversed(range(len(item))):
                stack.append((f"{where}[{index}]", item[index], depth + 1))


def _problem(item: Any) -> str | None:
    if isinstance(item, str):
        if "\x00" in item:
            return "contains a NUL character (\\u0000), which cannot be stored"
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            return "is not valid Unicode (it holds a lone surrogate)"
    elif isinstance(item, float) and not math.isfinite(item):
        return "is not a finite number"
    return None


# The fields of a JSON object body, checked one by one (ValidationFailed names the field).


def object_body(data: Any, known: Sequence[str]) -> Mapping[str, Any]:
    """``data`` when it is a JSON object with only ``known`` keys, holding nothing the
    platform cannot store (:func:`payload_check`)."""
    if not isinstance(data, Mapping):
        raise ValidationFailed("the body must be a JSON object")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValidationFailed(
            f"unknown field {unknown[0]!r} (known: {', '.join(known)})", field=unknown[0]
        )
    payload_check(dict(data))
    return data


def text_field(value: Any, field: str, *, max_chars: int) -> str:
    """A string of at most ``max_chars`` (None reads as "")."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > max_chars:
        raise ValidationFailed(f"{field} must be a string of at most {max_chars} characters",
                               field=field)  # fmt: skip
    return value


def flag_field(value: Any, field: str) -> bool:
    """A JSON boolean (no 0/1, no "true")."""
    if not isinstance(value, bool):
        raise ValidationFailed(f"{field} must be true or false", field=field)
    return value
