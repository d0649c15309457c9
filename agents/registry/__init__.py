"""The Python registry operators extend: function tools, hooks, effects and thread endpoints.

An installed app declares them in a module named ``agent_tools``::

    from pydantic import BaseModel
    from agents.registry import HookName, hook, thread_endpoint, tool

    class WeatherArgs(BaseModel):
        city: str

    @tool(description="Current weather for a city.", args=WeatherArgs)
    def get_weather(state, args: WeatherArgs) -> str: ...

    @hook(HookName.FILTER_MESSAGES, id="drop_drafts")
    def drop_drafts(state, messages, context): ...

    @thread_endpoint("reports/[id]", methods=["GET"])
    def report(request, state, params): ...

:func:`autodiscover` (run once by ``AgentsConfig.ready``) imports every such module. Decorators
record an entry into the *current* registry — the module-level :data:`registry`, unless code runs
inside :func:`use_registry` (tests do, so they never leak entries into the global one) — and
return the function unchanged. Names are checked when the module is imported: a bad name, an
unknown hook or a clash raises :class:`RegistryError` naming both definitions. Re-executing a
module (a reload, a second discovery) replaces its own entries silently.

Installed packages add entries without editing the settings (:mod:`agents.registry.extensions`):
a distribution declares a module in the entry-point group ``standard_agents_platform.extensions``,
or the setting ``PLATFORM_APPS`` names it. :meth:`Registry.source_of` tells where each entry came
from; an extension that fails to import or register stops start-up with ``ImproperlyConfigured``
naming it.

Operators may restrict items to some tenants with the setting ``AGENT_REGISTRY_RESTRICTED``
(``{"tools": {"send_invoice": ["acme"]}, "hooks": {<id>: [...]}, "effects": {...},
"endpoints": {"reports/[id]": [...]}}``); :meth:`Registry.visible_to` applies it. Everything not
listed there is visible to every tenant.
"""

from agents.registry.catalog import (
    RESTRICTION_KINDS,
    RESTRICTIONS_SETTING,
    Registry,
    RegistryView,
    current_registry,
    registry,
    use_registry,
)
from agents.registry.decorators import effect, hook, thread_endpoint, tool
from agents.registry.discovery import DISCOVERY_MODULE, autodiscover
from agents.registry.entries import (
    NO_ARGS_SCHEMA,
    EffectEntry,
    HookEntry,
    HookName,
    RegistryError,
    Source,
    SourceKind,
    ToolEntry,
    VariableDefinition,
)
from agents.registry.extensions import ENTRY_POINT_GROUP, PLATFORM_APPS_SETTING
from agents.registry.results import INVALID_TOOL_RESULT, ToolResult, tool_result_from
from agents.registry.routing import (
    HTTP_METHODS,
    EndpointEntry,
    EndpointMatch,
    EndpointMethodNotAllowed,
    Segment,
    SegmentKind,
    parse_route,
)

__all__ = [
    "DISCOVERY_MODULE",
    "ENTRY_POINT_GROUP",
    "HTTP_METHODS",
    "INVALID_TOOL_RESULT",
    "NO_ARGS_SCHEMA",
    "PLATFORM_APPS_SETTING",
    "RESTRICTIONS_SETTING",
    "RESTRICTION_KINDS",
    "EffectEntry",
    "EndpointEntry",
    "EndpointMatch",
    "EndpointMethodNotAllowed",
    "HookEntry",
    "HookName",
    "Registry",
    "RegistryError",
    "RegistryView",
    "Segment",
    "SegmentKind",
    "Source",
    "SourceKind",
    "ToolEntry",
    "ToolResult",
    "VariableDefinition",
    "autodiscover",
    "current_registry",
    "effect",
    "hook",
    "parse_route",
    "registry",
    "thread_endpoint",
    "tool",
    "tool_result_from",
    "use_registry",
]
