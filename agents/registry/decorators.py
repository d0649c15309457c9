"""The decorators operators write (``@tool``, ``@hook``, ``@effect``, ``@thread_endpoint``)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from agents.permissions import ConditionInvalid, Rule, rule_from
from agents.registry.catalog import Registry, current_registry
from agents.registry.entries import (
    NO_ARGS_SCHEMA,
    EffectEntry,
    HookEntry,
    HookName,
    RegistryError,
    ToolEntry,
    VariableDefinition,
    origin_of,
)
from agents.registry.routing import HTTP_METHODS, EndpointEntry, parse_route
from agents.schemas import format_path, schema_from_args
from common.errors import ValidationFailed

TOOL_NAME_LIMIT = 64  # OpenAI and Anthropic both cap function names at 64 characters
_SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")

F = TypeVar("F", bound=Callable[..., Any])


def tool(
    *,
    description: str,
    args: type[BaseModel] | Mapping[str, Any] | None = None,
    name: str | None = None,
    variables: Iterable[VariableDefinition] = (),
    progress_argument: str | None = None,
    approval: str | Mapping[str, Any] | None = None,
    into: Registry | None = None,
) -> Callable[[F], F]:
    """Register a function tool, called ``function(state, args)`` (or ``function(state)`` when
    ``args`` is None) with ``args`` a ``pydantic`` model instance when ``args`` is a model class,
    else the validated dict.

    ``name`` defaults to the function's name and must be snake_case (at most 64 characters);
    ``progress_argument`` must name a top-level argument; ``approval`` is the tool's default
    permission rule (:mod:`agents.permissions`: ``"deny"``, or ``{"decision", "when"}``),
    weighed with the rules of the prompts that list it. Raises :class:`RegistryError`.
    """

    def register(function: F) -> F:
        origin = origin_of(function)
        tool_name = _snake_case("Tool name", function.__name__ if name is None else name, origin)
        if len(tool_name) > TOOL_NAME_LIMIT:
            raise RegistryError(f"Tool name {tool_name!r} at {origin} exceeds 64 characters")
        schema = _args_schema(args, origin)
        if progress_argument is not None and progress_argument not in (schema or {}).get(
            "properties", {}
        ):
            raise RegistryError(
                f"progress_argument {progress_argument!r} of tool {tool_name!r} at {origin} "
                "is not one of its arguments"
            )
        entry = ToolEntry(
            approval=_approval(approval, tool_name, origin),
            name=tool_name,
            description=_description(description, origin),
            args_schema=schema if schema is not None else dict(NO_ARGS_SCHEMA),
            pydantic_model=_model(args),
            function=function,
            module=function.__module__,
            variables=_variables(variables, origin),
            progress_argument=progress_argument,
            takes_args=schema is not None,
        )
        (into or current_registry()).add_tool(entry)
        return function

    return register


def _approval(value: str | Mapping[str, Any] | None, tool_name: str, origin: str) -> Rule | None:
    if value is None:
        return None
    try:
        rule = rule_from(value, source="registry")
    except ConditionInvalid as error:
        where = f" at {error.path}" if error.path else ""
        raise RegistryError(
            f"approval of tool {tool_name!r} at {origin}{where}: {error.message}"
        ) from None
    return rule


def hook(
    hook_name: HookName | str, /, *, id: str | None = None, into: Registry | None = None
) -> Callable[[F], F]:
    """Register a hook implementation, called ``function(state, *arguments, context)`` as
    :class:`HookName` documents. ``id`` defaults to the function's name; snake_case, unique.
    Raises :class:`RegistryError` for an unknown hook name or a bad or taken id.
    """

    def register(function: F) -> F:
        origin = origin_of(function)
        try:
            known = HookName(hook_name)
        except ValueError:
            close = difflib.get_close_matches(str(hook_name), [h.value for h in HookName], n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise RegistryError(
                f"Unknown hook {hook_name!r} at {origin}; {hint}known hooks: {', '.join(HookName)}"
            ) from None
        hook_id = _snake_case("Hook id", function.__name__ if id is None else id, origin)
        entry = HookEntry(id=hook_id, hook=known, function=function, module=function.__module__)
        (into or current_registry()).add_hook(entry)
        return function

    return register


def effect(
    *,
    description: str,
    args: type[BaseModel] | Mapping[str, Any] | None = None,
    name: str | None = None,
    into: Registry | None = None,
) -> Callable[[F], F]:
    """Register an effect, run as ``function(state, args)`` (``function(state)`` without args).
    ``name`` defaults to the function's name; snake_case, unique. Raises :class:`RegistryError`.
    """

    def register(function: F) -> F:
        origin = origin_of(function)
        entry = EffectEntry(
            name=_snake_case("Effect name", function.__name__ if name is None else name, origin),
            description=_description(description, origin),
            args_schema=_args_schema(args, origin),
            function=function,
            module=function.__module__,
            pydantic_model=_model(args),
        )
        (into or current_registry()).add_effect(entry)
        return function

    return register


def thread_endpoint(
    route: str,
    /,
    *,
    methods: Iterable[str] | None = None,
    public: bool = False,
    into: Registry | None = None,
) -> Callable[[F], F]:
    """Register a thread endpoint, called ``function(request, state, params)``.

    ``route`` follows :func:`parse_route`; ``methods`` (case-insensitive) default to the route's
    method suffix, else GET. ``public`` endpoints also serve anonymous callers. Raises
    :class:`RegistryError` for a bad route or method, or a route shape and method already taken.
    """

    def register(function: F) -> F:
        origin = origin_of(function)
        try:
            suffix = parse_route(route)[2]
        except ValueError as error:
            raise RegistryError(f"Endpoint route {route!r} at {origin}: {error}") from None
        chosen = _methods(methods, suffix, route, origin)
        entry = EndpointEntry(
            route=route,
            methods=chosen,
            public=public,
            function=function,
            module=function.__module__,
        )
        (into or current_registry()).add_endpoint(entry)
        return function

    return register


def _snake_case(what: str, value: object, origin: str) -> str:
    if not isinstance(value, str) or not _SNAKE_CASE.match(value):
        raise RegistryError(f"{what} {value!r} at {origin} must be snake_case (e.g. get_weather)")
    return value


def _description(value: object, origin: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RegistryError(f"{origin} needs a non-empty description")
    return value.strip()


def _args_schema(args: object, origin: str) -> dict[str, Any] | None:
    try:
        return schema_from_args(args)
    except ValidationFailed as error:
        raise RegistryError(f"args of {origin}: {error.message}") from None


def _model(args: object) -> type[BaseModel] | None:
    return args if isinstance(args, type) and issubclass(args, BaseModel) else None


def _variables(items: Iterable[object], origin: str) -> tuple[VariableDefinition, ...]:
    variables: list[VariableDefinition] = []
    for position, item in enumerate(items):
        where = f"variables{format_path([position])} of {origin}"
        # Name and type are validated when a VariableDefinition is constructed.
        if not isinstance(item, VariableDefinition):
            raise RegistryError(f"{where} must be a VariableDefinition")
        if any(existing.name == item.name for existing in variables):
            raise RegistryError(f"{where}: variable {item.name!r} is declared twice")
        variables.append(item)
    return tuple(variables)


def _methods(
    methods: Iterable[str] | None, suffix: str | None, route: str, origin: str
) -> frozenset[str]:
    if methods is None:
        return frozenset({suffix or "GET"})
    if isinstance(methods, str):
        raise RegistryError(
            f"methods of endpoint {route!r} at {origin} must be a list, e.g. ['GET']"
        )
    chosen = frozenset(str(method).upper() for method in methods)
    unknown = chosen - HTTP_METHODS
    if not chosen or unknown:
        raise RegistryError(
            f"Endpoint {route!r} at {origin} has methods {sorted(unknown) or 'none'}; "
            f"allowed: {', '.join(sorted(HTTP_METHODS))}"
        )
    if suffix is not None and chosen != {suffix}:
        raise RegistryError(
            f"Endpoint {route!r} at {origin}: the route's .{suffix.lower()} suffix contradicts "
            f"methods {sorted(chosen)}"
        )
    return chosen
