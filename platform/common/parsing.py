"""Bounded parsing of the documents tenants send: a bundle (YAML or JSON) and a JSON value
typed into a form. Each parse is bounded while it runs, not after, so a hostile document
is a 400 within a fraction of a second instead of a process pinned for minutes.

- **No YAML aliases.** PyYAML builds ``*a`` as a second reference to the object ``&a``
  names, so a 2 KB "billion laughs" document (nine lists of nine aliases of the list before)
  loads in milliseconds and then costs hundreds of millions of steps to whatever walks it: a
  check, a validator, a serializer. An alias budget would still let each allowed alias
  multiply what follows it, and a document a person writes does not need one: a bundle is a
  list of definitions (the platform's own export never emits anchors), and a shared value
  can always be written out where it is used. So the first alias is refused, with its line.
  An anchor alone (``&a`` never referred to) is harmless and accepted.
- **Depth**: nesting past :data:`common.payloads.MAX_DEPTH` is refused while composing,
  before it could exhaust the recursion limit.
- **Values**: every node composed (a key counts as one) counts against the caller's
  :class:`common.payloads.NodeLimit`; the parse stops at the first node past it.
- **JSON** is read by :mod:`json` (C, and JSON has no aliases), then checked in one walk
  (:func:`common.payloads.payload_check` with the same NodeLimit, so the check is bounded too).

The byte size is the caller's to cap before parsing (``MAX_BUNDLE_BYTES``, Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE``): every limit here is linear in it.
"""

from __future__ import annotations

import json
from typing import Any

from yaml import YAMLError
from yaml._yaml import CParser
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, Event
from yaml.nodes import Node, ScalarNode
from yaml.resolver import Resolver

from common.errors import ValidationFailed
from common.payloads import MAX_DEPTH, NodeLimit, path_spelled, payload_check

_DEPTH_REFUSAL = f"nested more than {MAX_DEPTH} levels deep (the limit MAX_DEPTH)"


def document_parse(raw: str | bytes, *, nodes: NodeLimit) -> Any:
    """A YAML or JSON document as plain data, within ``nodes`` and MAX_DEPTH. Text that
    starts like JSON (``{`` or ``[``) is read as JSON; YAML reads the rest, and what
    JSON could not read (YAML's flow style starts the same way).

    Raises ValidationFailed naming the limit or the syntax error (and ``field``, the path
    in the document, when there is one)."""
    if raw.lstrip()[:1] in ("{", "[", b"{", b"["):
        try:
            value = _json_counted(raw, nodes)
        except RecursionError as error:
            raise ValidationFailed(_DEPTH_REFUSAL) from error
        except ValueError:
            return yaml_parse(raw, nodes=nodes)
        payload_check(value, nodes=nodes)
        return value
    return yaml_parse(raw, nodes=nodes)


def _json_counted(raw: str | bytes, nodes: NodeLimit) -> Any:
    """``json.loads`` that stops once the numbers, objects and keys it has read are more
    than ``nodes`` allows (each is one value of the walk that follows, so the count never
    exceeds the walk's): a document of many small values is refused before it is all
    built. Strings, lists and constants have no hook; the walk counts them."""
    read = 0

    def counted(values: int) -> None:
        nonlocal read
        read += values
        if read > nodes.count:
            raise nodes.refusal()

    def number(text: str, kind: type[int] | type[float]) -> int | float:
        counted(1)
        return kind(text)

    def mapping(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        counted(1 + len(pairs))
        return dict(pairs)

    return json.loads(
        raw,
        parse_int=lambda text: number(text, int),
        parse_float=lambda text: number(text, float),
        object_pairs_hook=mapping,
    )


def yaml_parse(raw: str | bytes, *, nodes: NodeLimit) -> Any:
    """A YAML document (one) as plain data, read by :class:`BoundedYamlLoader`, then checked
    by :func:`payload_check` (NUL characters, lone surrogates, non-finite numbers)."""
    loader = BoundedYamlLoader(raw, nodes=nodes)
    try:
        value = loader.get_single_data()
    except YAMLError as error:
        message = f"{nodes.subject} is neither valid YAML nor JSON: {error}"
        raise ValidationFailed(message) from error
    except ValueError as error:  # a value its type refuses: 2024-02-30, an int of 5000 digits
        raise ValidationFailed(
            f"{nodes.subject} holds a value YAML cannot read: {error}"
        ) from error
    finally:
        loader.dispose()
    payload_check(value, nodes=nodes)
    return value


def json_parse(text: str | bytes, *, field: str, nodes: NodeLimit | None = None) -> Any:
    """A JSON value typed into ``field`` as plain data, within MAX_DEPTH (and ``nodes``):
    ValidationFailed naming ``field`` (or the path under it) otherwise."""
    try:
        value = json.loads(text)
    except RecursionError as error:
        raise ValidationFailed(f"{field} is {_DEPTH_REFUSAL}", field=field) from error
    except ValueError as error:  # also an integer of more than 4300 digits
        raise ValidationFailed(f"{field} is not JSON: {error}", field=field) from error
    payload_check(value, path=field, nodes=nodes)
    return value


class BoundedYamlLoader(Composer, CParser, SafeConstructor, Resolver):
    """PyYAML's safe loader (libyaml scans and parses, PyYAML's composer and safe
    constructor build the data) whose composer refuses an alias, nesting past MAX_DEPTH and
    a node past ``nodes``, each with the line and the path where it is found (see the module
    docstring for why aliases are refused outright)."""

    def __init__(self, stream: str | bytes, *, nodes: NodeLimit) -> None:
        CParser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.nodes = nodes
        self.composed = 0
        self.path: list[str | int] = []

    def compose_node(self, parent: Node | None, index: int | Node | None) -> Node | None:
        step = _step(parent, index)
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            raise ValidationFailed(
                f"{self.nodes.subject} uses a YAML alias (*{event.anchor} at line "
                f"{_line(event)}), which is not accepted: write the value out where it is used",
                field=self._where(step),
            )
        self.composed += 1
        if self.composed > self.nodes.count:
            raise self.nodes.refusal(self._where(step))
        if step is None:
            return super().compose_node(parent, index)  # type: ignore[arg-type]
        if len(self.path) >= MAX_DEPTH:
            raise ValidationFailed(
                f"{_DEPTH_REFUSAL} at line {_line(event)}", field=self._where(step)
            )
        self.path.append(step)
        node = super().compose_node(parent, index)  # type: ignore[arg-type]
        self.path.pop()
        return node

    def _where(self, step: str | int | None) -> str | None:
        return path_spelled([*self.path, step] if step is not None else self.path) or None


def _step(parent: Node | None, index: int | Node | None) -> str | int | None:
    """The path segment of the node composed under ``parent`` at ``index``: a list index, a
    key (``?`` for a key that is not a scalar), or None for the root and for a key itself."""
    if parent is None or index is None:
        return None
    if isinstance(index, int):
        return index
    return str(index.value) if isinstance(index, ScalarNode) else "?"


def _line(event: Event | None) -> int | str:
    mark = event.start_mark if event is not None else None
    return mark.line + 1 if mark is not None else "?"
