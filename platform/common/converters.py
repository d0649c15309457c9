"""Path parameters: every one is matched by a registered path converter, so a malformed id
never reaches a view: no route matches it, and the API's catch-all answers a JSON 404.

The shapes, one converter each (Django's own; :data:`FREE_FORM` names the parameters that
take the last two):

- ``uuid``: an object's id, in its canonical form (lower-case hex with dashes, 36
  characters). Anything else, such as 36 hex digits without dashes, matches no route.
- ``str``: one path segment, compared as a string (a definition's, credential's or
  environment variable's name). Any value is safe: an unknown one is a 404 and one a write
  may not take is a 400 naming the field.
- ``path``: a KV key or a file path, which may hold ``/``; its view normalises it.

Routes written as regular expressions (DRF routers, ``@action(url_path=...)``) take a
converter's own pattern through :func:`group`, so both kinds of route accept exactly the
same values; ``tests/common/test_converters.py`` walks the URL resolver and fails on a
parameter that does neither.
"""

from __future__ import annotations

from typing import Final

from django.urls.converters import get_converters

# Parameters that are not ids, by name, and what they hold; they take ``str`` or ``path``
# (or, for ``route``, also nothing). Any other parameter is an id and must be a ``uuid``.
FREE_FORM: Final[dict[str, str]] = {
    "name": "a definition, credential or environment variable, by name",
    "kind": "one of the console's definition kinds (models, prompts, agents, code-tools)",
    "key": "a KV key: slash-separated segments",
    "file_path": "a path in the thread's file system",
    "route": "a thread endpoint's own sub-route (agents.registry.routing), maybe empty",
    "tenant_slug": "a tenant, by its slug (an A2A agent's tenant-scoped URL)",
    "agent": "an agent, by name (an AG-UI run's route)",
}


def pattern(converter: str) -> str:
    """The regular expression the registered ``converter`` matches (``uuid``, ``str``...)."""
    regex: str = get_converters()[converter].regex
    return regex


def group(name: str, converter: str = "uuid") -> str:
    """``(?P<name>...)``, matching exactly what the registered ``converter`` matches."""
    return f"(?P<{name}>{pattern(converter)})"
