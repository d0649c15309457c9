"""JSON Schema helpers: is a schema usable for tool arguments, and do these arguments satisfy it.

Paths name a place inside a JSON document in one form, used by every message here: object keys
are joined with dots, array indexes are bracketed, keys that are not plain identifiers are quoted
(``items[2].name``, ``properties.city.type``, ``labels["first name"]``), and the document
itself is ``$``. Argument errors read ``Tool argument validation failed: [items[1].qty] 0 is less
than the minimum of 1; [customer] is a required property`` (spec §7).

Schemas are Draft 2020-12 unless they declare another known dialect in ``$schema`` (zod and many
hand-written schemas say draft-07); ``format`` is checked where jsonschema can check it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.protocols import Validator
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError
from referencing import Registry as RefRegistry
from referencing import Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from common.errors import ValidationFailed

ROOT = "$"
MESSAGE_LIMIT = 200
_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")
_ADDITIONAL = re.compile(r"^Additional properties are not allowed")
# Keywords whose values are data, not subschemas: a ``$ref`` inside them is not a reference.
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})
# Keywords whose values map arbitrary names (which may be "default", "enum", ...) to subschemas.
_NAMED_SUBSCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)

JsonPath = Sequence[str | int]


@dataclass(frozen=True)
class SchemaProblem:
    """One thing wrong at one place: ``path`` in the module's path form, ``message`` for a human."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"[{self.path}] {self.message}"


class ArgumentsInvalid(ValidationFailed):
    """Tool (or effect) arguments break their schema; ``errors`` lists every problem.

    The message is the spec's ``Tool argument validation failed: [path] msg; ...`` and ``field``
    is the first problem's path, so the API and the persisted tool result say the same thing.
    """

    code = "invalid_arguments"

    def __init__(self, errors: Sequence[SchemaProblem]):
        self.errors = list(errors)
        detail = "; ".join(str(problem) for problem in self.errors)
        super().__init__(
            f"Tool argument validation failed: {detail}",
            field=self.errors[0].path if self.errors else None,
            details=[{"path": p.path, "message": p.message} for p in self.errors],
        )


class SchemaInvalid(ValidationFailed):
    """A JSON Schema offered for tool or effect arguments is unusable; ``problems`` says why."""

    code = "invalid_schema"

    def __init__(self, problems: Sequence[SchemaProblem], *, field: str | None = None):
        self.problems = list(problems)
        detail = "; ".join(str(problem) for problem in self.problems)
        super().__init__(
            f"Invalid arguments schema: {detail}",
            field=field,
            details=[{"path": p.path, "message": p.message} for p in self.problems],
        )


def format_path(path: Iterable[str | int]) -> str:
    """Render a JSON location as ``items[2].name``; the empty path is ``$``."""
    rendered = ""
    for part in path:
        if isinstance(part, int):
            rendered += f"[{part}]"
        elif _IDENTIFIER.match(part):
            rendered += f".{part}" if rendered else part
        else:
            rendered += f"[{json.dumps(part)}]"
    return rendered or ROOT


def check_schema(schema: object) -> list[SchemaProblem]:
    """Problems that stop ``schema`` from describing tool arguments; empty when it can.

    It must be a valid JSON Schema of its dialect (Draft 2020-12 by default), describe an object
    at the top (``"type": "object"``: tool arguments are a JSON object) and be self-contained:
    every ``$ref`` is local (``#...``) and resolves inside the schema.
    """
    if not isinstance(schema, Mapping):
        return [SchemaProblem(ROOT, "must be a JSON object")]
    cls = _validator_class(schema)
    meta = cls(cls.META_SCHEMA, format_checker=cls.FORMAT_CHECKER)
    problems = [
        SchemaProblem(format_path(error.absolute_path), _shorten(error.message))
        for error in meta.iter_errors(schema)
    ]
    if schema.get("type") != "object":
        problems.append(SchemaProblem("type", 'must be "object": tool arguments are a JSON object'))
    if not problems:
        problems.extend(_reference_problems(schema))
    return sorted(set(problems), key=lambda problem: (problem.path, problem.message))


def validate_args(schema: Mapping[str, Any] | None, args: object) -> dict[str, Any]:
    """Check ``args`` against ``schema`` and return them as a new dict.

    ``schema`` None means a tool without arguments: ``{}`` and None pass, anything else fails.
    With a schema, None counts as ``{}`` (a model that sends no arguments sends nothing).
    Precondition: ``schema`` passed :func:`check_schema`.

    Raises :class:`ArgumentsInvalid` listing every error, sorted by path then message.
    """
    instance: Any = {} if args is None else args  # any JSON value may arrive here
    if schema is None:
        if instance != {}:
            raise ArgumentsInvalid([SchemaProblem(ROOT, "this tool takes no arguments")])
        return {}
    cls = _validator_class(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    problems = sorted(
        {problem for error in validator.iter_errors(instance) for problem in _explain(error)},
        key=_problem_order,
    )
    if problems:
        raise ArgumentsInvalid(problems)
    if not isinstance(instance, Mapping):
        raise ArgumentsInvalid([SchemaProblem(ROOT, "arguments must be a JSON object")])
    return dict(instance)


def schema_from_args(args: object) -> dict[str, Any] | None:
    """The JSON Schema for a tool's or effect's ``args`` declaration.

    Accepts a pydantic model class (its ``model_json_schema()``, whose ``$defs`` stay at the top
    so the schema is self-contained), a JSON Schema mapping (returned as a deep copy), or None
    (no arguments -> None).

    Raises :class:`SchemaInvalid` (a ``ValidationFailed``) naming every problem when the schema
    fails :func:`check_schema`, and ``ValidationFailed`` for anything else.
    """
    if args is None:
        return None
    if isinstance(args, type) and issubclass(args, BaseModel):
        schema: dict[str, Any] = args.model_json_schema()
    elif isinstance(args, Mapping):
        schema = copy.deepcopy(dict(args))
    else:
        raise ValidationFailed(
            "args must be a pydantic model class, a JSON Schema object or None, "
            f"not {type(args).__name__}",
            field="args",
        )
    problems = check_schema(schema)
    if problems:
        raise SchemaInvalid(problems, field="args")
    return schema


def _validator_class(schema: Mapping[str, Any]) -> type[Validator]:
    return validators.validator_for(schema, default=Draft202012Validator)


def _explain(error: ValidationError) -> Iterator[SchemaProblem]:
    """One error as problems pinned to the offending key where jsonschema pins the parent."""
    path = list(error.absolute_path)
    if error.validator == "required":
        missing = _quoted_name(error.message, error.validator_value)
        if missing is not None:
            yield SchemaProblem(format_path([*path, missing]), "is a required property")
            return
    if (
        error.validator == "additionalProperties"
        and error.validator_value is False
        and isinstance(error.instance, Mapping)
        and _ADDITIONAL.match(error.message)
    ):
        unexpected = _unexpected_keys(error.instance, error.schema)
        if unexpected:
            for key in unexpected:
                yield SchemaProblem(format_path([*path, key]), "is not an allowed property")
            return
    yield SchemaProblem(format_path(path), _shorten(error.message))


def _quoted_name(message: str, candidates: object) -> str | None:
    if not isinstance(candidates, list):
        return None
    for name in candidates:
        if isinstance(name, str) and message == f"{name!r} is a required property":
            return name
    return None


def _unexpected_keys(instance: Mapping[str, Any], schema: object) -> list[str]:
    if not isinstance(schema, Mapping):
        return []
    declared = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    return [
        key
        for key in instance
        if isinstance(key, str)
        and key not in declared
        and not any(re.search(pattern, key) for pattern in patterns)
    ]


def _problem_order(problem: SchemaProblem) -> tuple[list[tuple[int, int, str]], str]:
    """Sort by path structurally (``items[2]`` before ``items[10]``), then by message."""
    parts = re.findall(r'\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]|\.?([^.\[]+)', problem.path)
    key = [
        (0, int(index), "") if index else (1, 0, quoted or plain) for index, quoted, plain in parts
    ]
    return key, problem.message


def _shorten(message: str) -> str:
    if len(message) <= MESSAGE_LIMIT:
        return message
    return message[: MESSAGE_LIMIT - 1] + "…"


def _reference_problems(schema: Mapping[str, Any]) -> Iterator[SchemaProblem]:
    resource = Resource.from_contents(dict(schema), default_specification=DRAFT202012)
    resolver = RefRegistry().with_resource("urn:agents:args", resource).resolver("urn:agents:args")
    for path, ref in _references(schema, []):
        if not ref.startswith("#"):
            yield SchemaProblem(
                format_path(path),
                "only local references (#...) are allowed: the schema must be self-contained",
            )
            continue
        try:
            resolver.lookup(ref)
        except Unresolvable:
            yield SchemaProblem(format_path(path), f"{ref!r} does not resolve inside the schema")


def _references(
    node: object, path: list[str | int], *, names: bool = False
) -> Iterator[tuple[list[str | int], str]]:
    """Every ``$ref`` in ``node``; ``names`` marks a mapping of names to subschemas."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if not names and key in ("$ref", "$dynamicRef") and isinstance(value, str):
                yield [*path, key], value
            elif names or key not in _DATA_KEYWORDS:
                yield from _references(
                    value, [*path, key], names=not names and key in _NAMED_SUBSCHEMAS
                )
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _references(value, [*path, index])


def problems_from_pydantic(error: PydanticValidationError) -> list[SchemaProblem]:
    """A pydantic ``ValidationError`` as problems in this module's path form and order."""
    problems = {
        SchemaProblem(format_path(detail["loc"]), _shorten(detail["msg"]))
        for detail in error.errors(include_url=False)
    }
    return sorted(problems, key=_problem_order)
