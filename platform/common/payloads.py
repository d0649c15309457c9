"""What a request body may hold: values JSON can carry and PostgreSQL can store.

Parsed input is walked once (without recursion) before anything reads it: nesting deeper
than :data:`MAX_DEPTH`, a NUL character, a lone surrogate and a non-finite number are each
refused with a ValidationFailed naming where they are (``metadata.a[2]``), so they become a
400 instead of an error deep in a parser, a serializer or the database. The walk costs one
step per value whatever the keys' lengths, and a :class:`NodeLimit` caps the values it may
visit (a document parsed from text is bounded by its size; see :mod:`common.parsing`).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from common.errors import ValidationFailed

MAX_DEPTH = 64


@dataclass(frozen=True)
class NodeLimit:
    """At most ``count`` values in one document (a key counts as one), the constant quoted
    in the refusal being ``name``: "``subject`` holds more than ``count`` values (the limit
    ``name``)"."""

    count: int
    name: str
    subject: str = "the document"

    def refusal(self, field: str | None = None) -> ValidationFailed:
        return ValidationFailed(
            f"{self.subject} holds more than {self.count} values (the limit {self.name})",
            field=field or None,
        )


def payload_check(value: Any, *, path: str = "", nodes: NodeLimit | None = None) -> None:
    """Raise ValidationFailed for the first value ``value`` holds that the platform cannot
    take (see the module docstring); ``path`` prefixes the field named.

    The walk is linear in the values it visits and takes a container's children one at a
    time: a value's path is spelled out only when it is refused. With ``nodes`` every visit
    counts (a key too), so an object held in several places (parsed data never shares one,
    but Python-built data may) costs once per place, and a walk of more than
    ``nodes.count`` values stops there with ``nodes.refusal``."""
    limit = nodes.count if nodes is not None else math.inf
    visits = 0
    # Each open container: its place, its children not yet visited, their depth, and
    # whether a key names them (else an index). The root is the one child of a pseudo-list.
    opened: list[_Open] = [(None, iter(((None, value),)), 0, False)]
    while opened:
        parent, children, depth, keyed = opened[-1]
        for segment, item in children:
            if keyed:
                segment = str(segment)
            visits += 1
            if visits > limit and nodes is not None:
                raise nodes.refusal(_spelled(path, parent, segment) or None)
            if depth > MAX_DEPTH:
                message = f"nested more than {MAX_DEPTH} levels deep (the limit MAX_DEPTH)"
                raise ValidationFailed(message, field=_spelled(path, parent, segment) or None)
            if isinstance(item, str | float):
                problem = _problem(item)
                if problem is not None:
                    raise ValidationFailed(problem, field=_spelled(path, parent, segment) or None)
            elif item is None or isinstance(item, int):
                continue
            elif isinstance(item, list | tuple | Mapping):
                step = _Step(parent, segment) if segment is not None else parent
                visits = _keys_check(item, path, step, visits, limit, nodes)
                opened.append(_opening(item, step, depth + 1))
                break  # its children come before this container's next one
        else:
            opened.pop()


_Open = tuple["_Step | None", Iterator[tuple[Any, Any]], int, bool]


def _opening(item: list[Any] | tuple[Any, ...] | Mapping[Any, Any], step: _Step | None,
             depth: int) -> _Open:  # fmt: skip
    if isinstance(item, Mapping):
        return step, iter(item.items()), depth, True
    return step, enumerate(item), depth, False


def _keys_check(item: object, path: str, step: _Step | None, visits: int, limit: float,
                nodes: NodeLimit | None) -> int:  # fmt: skip
    """Check a mapping's keys (each a visit, named at the mapping's path); the visits then."""
    if not isinstance(item, Mapping):
        return visits
    for key in item:
        visits += 1
        if visits > limit and nodes is not None:
            raise nodes.refusal(_spelled(path, step) or None)
        problem = _problem(str(key))
        if problem is not None:
            raise ValidationFailed(problem, field=_spelled(path, step) or None)
    return visits


class _Step(NamedTuple):
    """A container's place, linked to its parent's: a child costs one tuple, not a copy of
    its parent's path (a long key above a long list made the walk quadratic)."""

    parent: _Step | None
    segment: str | int


def _spelled(prefix: str, parent: _Step | None, segment: str | int | None = None) -> str:
    segments: list[str | int] = [] if segment is None else [segment]
    while parent is not None:
        segments.append(parent.segment)
        parent = parent.parent
    return path_spelled(reversed(segments), prefix=prefix)


def path_spelled(segments: Iterable[str | int], *, prefix: str = "") -> str:
    """The field a path names: ``prefix.a[2].b`` for the segments ``a``, ``2``, ``b``."""
    spelled = prefix
    for segment in segments:
        if isinstance(segment, int):
            spelled += f"[{segment}]"
        else:
            spelled += f".{segment}" if spelled else segment
    return spelled


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
    known_keys_check(data, known)
    payload_check(dict(data))
    return data


def known_keys_check(data: Mapping[str, Any], known: Sequence[str], *, path: str = "") -> None:
    """Raise ValidationFailed for the first key of ``data`` (in the order sent) that is not
    one of ``known``, naming its full path (``path`` prefixes it) and the nearest known key
    (:func:`unknown_field_message`)."""
    for key in data:
        if key not in known:
            name = str(key)
            raise ValidationFailed(
                unknown_field_message(name, known), field=f"{path}.{name}" if path else name
            )


def unknown_field_message(key: str, known: Sequence[str]) -> str:
    """``unknown field 'rol' (did you mean 'role'?)`` when a known key is close to ``key``
    (difflib's ratio of 0.6 or more), else the known keys."""
    close = difflib.get_close_matches(key, [str(name) for name in known], n=1)
    if close:
        return f"unknown field {key!r} (did you mean {close[0]!r}?)"
    return f"unknown field {key!r} (known: {', '.join(known) or 'none'})"


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
