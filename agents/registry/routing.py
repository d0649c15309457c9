"""Thread endpoint routes (spec §10): syntax, matching and precedence."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from agents.registry.entries import origin_of
from common.errors import DomainError

HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_PARAMETER = re.compile(r"^\[([A-Za-z_][A-Za-z0-9_]*|\*)\]$")
_STATIC_SEGMENT = re.compile(r"^[A-Za-z0-9._~-]+$")


class EndpointMethodNotAllowed(DomainError):
    """The path names an endpoint, but not for this method; ``allowed`` lists those that do."""

    code = "method_not_allowed"
    status = 405

    def __init__(self, method: str, path: str, allowed: frozenset[str]):
        self.allowed = allowed
        super().__init__(
            f"{method} is not allowed on endpoint {path!r}; allowed: {', '.join(sorted(allowed))}"
        )


class SegmentKind(IntEnum):
    """Route segment kinds, in precedence order: a lower kind wins at the same position."""

    STATIC = 0
    DYNAMIC = 1
    CATCH_ALL = 2


@dataclass(frozen=True)
class Segment:
    kind: SegmentKind
    value: str  # the literal text, or the parameter name ("*" for the catch-all)


@dataclass(frozen=True)
class EndpointEntry:
    """A thread endpoint, mounted at ``/threads/<id>/<route>``.

    ``route`` is normalised on creation (:func:`parse_route`): no outer slashes, no ``index``, no
    method suffix (``methods`` say which methods it serves); ``""`` is the thread's index route.
    """

    route: str
    methods: frozenset[str]
    public: bool
    function: Callable[..., Any]
    module: str
    segments: tuple[Segment, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Normalise ``route`` and parse it. Raises ``ValueError`` for a malformed route."""
        normalised, segments, _ = parse_route(self.route)
        object.__setattr__(self, "route", normalised)
        object.__setattr__(self, "segments", segments)

    @property
    def origin(self) -> str:
        return origin_of(self.function)

    @property
    def shape(self) -> tuple[tuple[SegmentKind, str], ...]:
        """The route with parameter names erased: routes of one shape match the same paths."""
        return tuple(
            (s.kind, s.value if s.kind is SegmentKind.STATIC else "") for s in self.segments
        )

    @property
    def precedence(self) -> tuple[SegmentKind, ...]:
        """Compared position by position; the smaller wins (static < dynamic < catch-all)."""
        return tuple(segment.kind for segment in self.segments)

    def match(self, parts: Sequence[str]) -> dict[str, str] | None:
        """The parameters if this route matches the path ``parts``, else None."""
        params: dict[str, str] = {}
        for index, segment in enumerate(self.segments):
            if segment.kind is SegmentKind.CATCH_ALL:
                rest = parts[index:]
                if not rest:
                    return None
                params["*"] = "/".join(rest)
                return params
            if index >= len(parts):
                return None
            if segment.kind is SegmentKind.STATIC and parts[index] != segment.value:
                return None
            if segment.kind is SegmentKind.DYNAMIC:
                if not parts[index]:
                    return None
                params[segment.value] = parts[index]
        return params if len(parts) == len(self.segments) else None


@dataclass(frozen=True)
class EndpointMatch:
    entry: EndpointEntry
    params: dict[str, str]


def parse_route(route: str) -> tuple[str, tuple[Segment, ...], str | None]:
    """``(normalised route, segments, method from a .get/.post/... suffix or None)``.

    Syntax (spec §10): segments separated by ``/``; ``[name]`` captures one segment into
    ``params[name]``; ``[*]``, only last, captures one or more segments, slashes included, into
    ``params["*"]``; a last segment ``index`` stands for its directory; the last segment may end
    in a method suffix (``report.post``), case-insensitive. Raises ``ValueError`` saying what is
    wrong.
    """
    parts = route.strip().strip("/").split("/") if route.strip("/ ") else []
    method = None
    if parts:
        stem, dot, suffix = parts[-1].rpartition(".")
        if dot and stem and suffix.upper() in HTTP_METHODS:
            parts[-1], method = stem, suffix.upper()
        if parts[-1] == "index":
            parts.pop()
    segments: list[Segment] = []
    for position, part in enumerate(parts):
        parameter = _PARAMETER.match(part)
        if parameter is None:
            if not _STATIC_SEGMENT.match(part) or part in (".", ".."):
                raise ValueError(f"segment {part!r} is neither [name], [*] nor plain text")
            segments.append(Segment(SegmentKind.STATIC, part))
        elif parameter.group(1) == "*":
            if position != len(parts) - 1:
                raise ValueError("the catch-all [*] must be the last segment")
            segments.append(Segment(SegmentKind.CATCH_ALL, "*"))
        elif any(s.value == parameter.group(1) for s in segments):
            raise ValueError(f"parameter [{parameter.group(1)}] appears twice")
        else:
            segments.append(Segment(SegmentKind.DYNAMIC, parameter.group(1)))
    return "/".join(parts), tuple(segments), method


def path_parts(path: str) -> list[str]:
    stripped = path.strip("/")
    return stripped.split("/") if stripped else []
