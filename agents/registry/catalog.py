"""The registry itself, per-tenant views of it, and which registry is current."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

from django.conf import settings

from agents.registry.entries import (
    EffectEntry,
    HookEntry,
    HookName,
    RegistryError,
    Source,
    SourceKind,
    ToolEntry,
)
from agents.registry.routing import (
    EndpointEntry,
    EndpointMatch,
    EndpointMethodNotAllowed,
    parse_route,
    path_parts,
)

RESTRICTIONS_SETTING = "AGENT_REGISTRY_RESTRICTED"
RESTRICTION_KINDS = ("tools", "hooks", "effects", "endpoints")


class _Catalog:
    """The read side shared by :class:`Registry` and :class:`RegistryView`."""

    def __init__(
        self,
        tools: dict[str, ToolEntry],
        hooks: dict[str, HookEntry],
        effects: dict[str, EffectEntry],
        endpoints: list[EndpointEntry],
        sources: dict[str, Source],
    ):
        self._tools = tools
        self._hooks = hooks
        self._effects = effects
        self._endpoints = endpoints
        self._sources = sources

    @property
    def tools(self) -> Mapping[str, ToolEntry]:
        return MappingProxyType(self._tools)

    @property
    def hooks(self) -> Mapping[str, HookEntry]:
        """Hook entries by id."""
        return MappingProxyType(self._hooks)

    @property
    def effects(self) -> Mapping[str, EffectEntry]:
        return MappingProxyType(self._effects)

    @property
    def endpoints(self) -> tuple[EndpointEntry, ...]:
        return tuple(self._endpoints)

    def source_of(self, entry: ToolEntry | HookEntry | EffectEntry | EndpointEntry) -> Source:
        """Where ``entry`` came from: the app or extension whose discovery registered its
        module; a module registered outside discovery is its own source."""
        return self._sources.get(entry.module) or Source(SourceKind.MODULE, entry.module)

    def tool(self, name: str) -> ToolEntry | None:
        return self._tools.get(name)

    def hook(self, id: str) -> HookEntry | None:
        return self._hooks.get(id)

    def effect(self, name: str) -> EffectEntry | None:
        return self._effects.get(name)

    def tool_names(self) -> list[str]:
        return sorted(self._tools)

    def hook_ids(self) -> list[str]:
        return sorted(self._hooks)

    def effect_names(self) -> list[str]:
        return sorted(self._effects)

    def hooks_for(self, hook: HookName | str) -> list[HookEntry]:
        """Hook entries implementing ``hook``, by id."""
        return [entry for _, entry in sorted(self._hooks.items()) if entry.hook == hook]

    def match_endpoint(self, method: str, path: str) -> EndpointMatch | None:
        """The endpoint serving ``method path`` (path relative to the thread), or None.

        Among routes that match the path and allow the method, the one with the smallest
        :attr:`EndpointEntry.precedence` wins (static beats dynamic beats catch-all, position by
        position). Raises :class:`EndpointMethodNotAllowed` when routes match the path but none
        allows the method, so the API can tell 405 from 404.
        """
        method = method.upper()
        parts = path_parts(path)
        best: EndpointMatch | None = None
        allowed: set[str] = set()
        for entry in self._endpoints:
            params = entry.match(parts)
            if params is None:
                continue
            allowed |= entry.methods
            if method in entry.methods and (
                best is None or entry.precedence < best.entry.precedence
            ):
                best = EndpointMatch(entry, params)
        if best is None and allowed:
            raise EndpointMethodNotAllowed(method, path, frozenset(allowed))
        return best


class RegistryView(_Catalog):
    """What one tenant may see and use: the registry minus items restricted to other tenants."""

    def __init__(self, tenant_slug: str, catalog: _Catalog, rules: _Restrictions):
        self.tenant_slug = tenant_slug
        super().__init__(
            {n: e for n, e in catalog.tools.items() if rules.allows("tools", n, tenant_slug)},
            {i: e for i, e in catalog.hooks.items() if rules.allows("hooks", i, tenant_slug)},
            {n: e for n, e in catalog.effects.items() if rules.allows("effects", n, tenant_slug)},
            [e for e in catalog.endpoints if rules.allows("endpoints", e.route, tenant_slug)],
            catalog._sources,
        )


class Registry(_Catalog):
    """All registered tools, hooks, effects and endpoints, regardless of tenant."""

    def __init__(self) -> None:
        super().__init__({}, {}, {}, [], {})
        self._discovered: set[str] = set()

    def visible_to(self, tenant_slug: str) -> RegistryView:
        """What tenant ``tenant_slug`` may use, per ``AGENT_REGISTRY_RESTRICTED`` (read now)."""
        return RegistryView(tenant_slug, self, _Restrictions.from_settings())

    def check_restrictions(self) -> list[str]:
        """Problems with ``AGENT_REGISTRY_RESTRICTED``: entries naming nothing registered (typos),
        unknown kinds, malformed values. Empty when the setting is sound."""
        return _Restrictions.from_settings().problems(self)

    def knows_module(self, name: str) -> bool:
        """Whether module ``name`` was discovered into this registry or contributed to it."""
        return name in self._discovered or name in self.modules()

    def mark_discovered(self, names: Iterable[str]) -> None:
        self._discovered.update(names)

    def record_source(self, modules: Iterable[str], source: Source) -> None:
        """Attribute the entries of ``modules`` to ``source`` (discovery calls it)."""
        self._sources.update(dict.fromkeys(modules, source))

    def modules(self) -> set[str]:
        """Modules that contributed at least one entry."""
        entries: list[ToolEntry | HookEntry | EffectEntry | EndpointEntry] = [
            *self._tools.values(),
            *self._hooks.values(),
            *self._effects.values(),
            *self._endpoints,
        ]
        return {entry.module for entry in entries}

    def add_tool(self, entry: ToolEntry) -> None:
        """Record ``entry``. Raises :class:`RegistryError` if another function has its name."""
        self._tools[entry.name] = _unclashed("Tool", entry.name, entry, self._tools.get(entry.name))

    def add_hook(self, entry: HookEntry) -> None:
        """Record ``entry``. Raises :class:`RegistryError` if another function has its id."""
        self._hooks[entry.id] = _unclashed("Hook id", entry.id, entry, self._hooks.get(entry.id))

    def add_effect(self, entry: EffectEntry) -> None:
        """Record ``entry``. Raises :class:`RegistryError` if another function has its name."""
        existing = self._effects.get(entry.name)
        self._effects[entry.name] = _unclashed("Effect", entry.name, entry, existing)

    def add_endpoint(self, entry: EndpointEntry) -> None:
        """Record ``entry``. Raises :class:`RegistryError` if another function serves the same
        route shape for one of its methods (parameter names do not tell routes apart)."""
        kept = []
        for other in self._endpoints:
            if other.shape != entry.shape or not other.methods & entry.methods:
                kept.append(other)
            elif other.origin != entry.origin:
                clash = ", ".join(sorted(other.methods & entry.methods))
                raise RegistryError(
                    f"Endpoint {clash} {entry.route!r} defined at {entry.origin} clashes with "
                    f"{other.route!r}, already registered by {other.origin}"
                )
        self._endpoints[:] = [*kept, entry]


_Entry = TypeVar("_Entry", ToolEntry, HookEntry, EffectEntry)


def _unclashed(kind: str, key: str, entry: _Entry, existing: _Entry | None) -> _Entry:
    if existing is not None and existing.origin != entry.origin:
        raise RegistryError(
            f"{kind} {key!r} defined at {entry.origin} is already registered by {existing.origin}"
        )
    return entry


@dataclass(frozen=True)
class _Restrictions:
    """``AGENT_REGISTRY_RESTRICTED`` parsed: per kind, item key -> tenant slugs allowed."""

    raw: object
    rules: Mapping[str, Mapping[str, frozenset[str]]]

    @classmethod
    def from_settings(cls) -> _Restrictions:
        raw = getattr(settings, RESTRICTIONS_SETTING, {})
        rules: dict[str, dict[str, frozenset[str]]] = {}
        for kind in RESTRICTION_KINDS:
            items = raw.get(kind) if isinstance(raw, Mapping) else None
            if not isinstance(items, Mapping):
                continue
            rules[kind] = {}
            for key, slugs in items.items():
                normalised = _restriction_key(kind, key)
                if normalised is not None:
                    rules[kind][normalised] = _slugs(slugs)
        return cls(raw, rules)

    def allows(self, kind: str, key: str, tenant_slug: str) -> bool:
        slugs = self.rules.get(kind, {}).get(key)
        return slugs is None or tenant_slug in slugs

    def problems(self, catalog: _Catalog) -> list[str]:
        if not isinstance(self.raw, Mapping):
            return [f"{RESTRICTIONS_SETTING} must be a dict like {{'tools': {{name: [slugs]}}}}"]
        problems = [
            f"{RESTRICTIONS_SETTING} has an unknown kind {kind!r}; "
            f"expected one of {', '.join(RESTRICTION_KINDS)}"
            for kind in self.raw
            if kind not in RESTRICTION_KINDS
        ]
        known = {
            "tools": set(catalog.tools),
            "hooks": set(catalog.hooks),
            "effects": set(catalog.effects),
            "endpoints": {entry.route for entry in catalog.endpoints},
        }
        for kind in RESTRICTION_KINDS:
            problems.extend(self._kind_problems(kind, self.raw.get(kind, {}), known[kind]))
        return problems

    @staticmethod
    def _kind_problems(kind: str, items: object, known: set[str]) -> Iterator[str]:
        where = f"{RESTRICTIONS_SETTING}[{kind!r}]"
        if not isinstance(items, Mapping):
            yield f"{where} must be a dict of names to lists of tenant slugs"
            return
        for key, slugs in items.items():
            normalised = _restriction_key(kind, key)
            if normalised is None:
                yield f"{where}[{key!r}] is not a valid route"
            elif normalised not in known:
                close = difflib.get_close_matches(normalised, sorted(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                yield f"{where}[{key!r}] names no registered {kind[:-1]}{hint}"
            if isinstance(slugs, str) or not (
                isinstance(slugs, Iterable) and all(isinstance(slug, str) for slug in slugs)
            ):
                yield f"{where}[{key!r}] must be a list of tenant slugs"


def _restriction_key(kind: str, key: object) -> str | None:
    if not isinstance(key, str):
        return None
    if kind != "endpoints":
        return key
    try:
        return parse_route(key)[0]
    except ValueError:
        return None


def _slugs(value: object) -> frozenset[str]:
    """Tenant slugs from a setting value; anything malformed allows no tenant (fail closed)."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        return frozenset()
    return frozenset(slug for slug in value if isinstance(slug, str))


registry = Registry()
"""The process-wide registry that ``agent_tools`` modules fill at start-up."""

_current: ContextVar[Registry] = ContextVar("agents_current_registry")


def current_registry() -> Registry:
    """The registry decorators write into: :data:`registry` unless inside :func:`use_registry`."""
    return _current.get(registry)


@contextmanager
def use_registry(target: Registry | None = None) -> Iterator[Registry]:
    """Make ``target`` (a fresh registry by default) current for the block.

    Decorators, :func:`autodiscover` and the system check use it; tests use this so that their
    registrations never reach the global :data:`registry`.
    """
    target = Registry() if target is None else target
    token = _current.set(target)
    try:
        yield target
    finally:
        _current.reset(token)
