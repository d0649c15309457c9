"""Extensions: registry entries from installed packages, without editing the settings.

Two doors name them, both read at start-up: the entry-point group :data:`ENTRY_POINT_GROUP`
of installed distributions, and the setting ``PLATFORM_APPS`` (comma-separated in the
environment). Each names a module. A package with an ``apps`` or ``models`` module is a Django
app: the settings add it to ``INSTALLED_APPS`` (:func:`extension_apps`) and discovery imports its
``agent_tools`` module like any app's. Any other module is imported by discovery itself, and its
decorators register its entries.

Nothing here reads the settings or needs the app registry: the settings call
:func:`extension_apps` before Django is set up.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.machinery import PathFinder
from importlib.metadata import EntryPoint, entry_points
from traceback import walk_tb

from agents.registry.entries import Source, SourceKind

ENTRY_POINT_GROUP = "standard_agents_platform.extensions"
PLATFORM_APPS_SETTING = "PLATFORM_APPS"
_APP_MODULES = ("apps", "models")


@dataclass(frozen=True)
class Extension:
    """One module an entry point or ``PLATFORM_APPS`` names.

    ``problem`` says what is wrong with the declaration itself (an entry point naming an
    object instead of a module); discovery refuses such an extension.
    """

    module: str
    source: Source
    entry_point: str | None = None  # its name, for an entry point
    problem: str | None = None

    def describe(self) -> str:
        """The extension as an operator finds it: the distribution and entry point, or the
        setting."""
        if self.source.kind is SourceKind.PACKAGE:
            return (
                f"extension {self.module!r} (entry point {self.entry_point!r} of "
                f"{self.source.name} {self.source.version})"
            )
        return f"extension {self.module!r} (named in {PLATFORM_APPS_SETTING})"

    def failure(self, error: BaseException) -> str:
        """One line naming the extension, the cause and, when known, the extension's line that
        raised it."""
        where = _extension_frame(error, self.module.split(".")[0])
        at = f" (at {where})" if where else ""
        return f"{self.describe()} failed to load: {type(error).__name__}: {error}{at}"


def declared_extensions(platform_apps: Iterable[str]) -> list[Extension]:
    """Every extension installed distributions and ``platform_apps`` declare, entry points
    first (by distribution, then entry point name), each module once."""
    found: dict[str, Extension] = {}
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=_entry_point_order):
        extension = _from_entry_point(point)
        found.setdefault(extension.module, extension)
    for name in platform_apps:
        found.setdefault(name, Extension(name, Source(SourceKind.SETTING, name)))
    return list(found.values())


def is_django_app(module: str) -> bool:
    """Whether ``module`` is a package with an ``apps`` or ``models`` module.

    Executes none of the package's code (only its parent packages, for a dotted name); False
    when the module cannot be found (discovery then reports it).
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    locations = None if spec is None else spec.submodule_search_locations
    if not locations:
        return False
    return any(
        PathFinder.find_spec(f"{module}.{name}", list(locations)) is not None
        for name in _APP_MODULES
    )


def extension_apps(platform_apps: Iterable[str]) -> list[str]:
    """The declared extensions that are Django apps, for ``INSTALLED_APPS``."""
    return [
        extension.module
        for extension in declared_extensions(platform_apps)
        if extension.problem is None and is_django_app(extension.module)
    ]


def _entry_point_order(point: EntryPoint) -> tuple[str, str]:
    return (point.dist.name if point.dist is not None else "", point.name)


def _from_entry_point(point: EntryPoint) -> Extension:
    distribution = point.dist
    source = Source(
        SourceKind.PACKAGE,
        distribution.name if distribution is not None else "(unknown distribution)",
        distribution.version if distribution is not None else None,
    )
    problem = None
    if point.attr is not None:
        problem = f"the entry point names {point.value!r}; it must name a module, not an object"
    return Extension(point.module, source, entry_point=point.name, problem=problem)


def _extension_frame(error: BaseException, package: str) -> str | None:
    """``file:line`` of the innermost frame of ``error`` running code of ``package``."""
    where = None
    for frame, line in walk_tb(error.__traceback__):
        name = frame.f_globals.get("__name__", "")
        if name == package or name.startswith(f"{package}."):
            where = f"{frame.f_code.co_filename}:{line}"
    if where is None and isinstance(error, SyntaxError) and error.filename:
        where = f"{error.filename}:{error.lineno}"
    return where
