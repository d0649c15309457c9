"""Tool references to remote sources in a prompt's ``tools[]`` (``mcp:<server>/<tool>``).

Definitions live here, in agents; the remote sources live in an app above it (connectors),
which agents may not import. That app registers, when it is ready, a lookup for its prefix
(:func:`remote_source_register`); definition validation judges a reference through
:class:`RemoteRefs`, which asks the source that owns the reference's prefix. A reference whose
prefix no app registered is not a remote reference here (validation refuses it as before).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tenancy.models import Tenant


@dataclass(frozen=True)
class RemoteRefCheck:
    """A remote reference as validation sees it: the tool names the model would see (as far
    as known) and the problem that refuses it (None: it may be saved)."""

    names: tuple[str, ...] = ()
    problem: str | None = None


class RemoteToolLookup(Protocol):
    def resolve(self, ref: str) -> RemoteRefCheck | None:
        """The check of ``ref``, or None when ``ref`` is no reference of this lookup's."""


class NoRemoteTools:
    """No remote source: no reference is a remote one."""

    def resolve(self, ref: str) -> RemoteRefCheck | None:
        return None


_SOURCES: dict[str, Callable[[Tenant], RemoteToolLookup]] = {}


def remote_source_register(prefix: str, lookup: Callable[[Tenant], RemoteToolLookup]) -> None:
    """Let references starting with ``prefix`` (``"mcp:"``) be judged by ``lookup(tenant)``."""
    _SOURCES[prefix] = lookup


class RemoteRefs:
    """Every registered source's lookup for one tenant, each built on first use."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self._built: dict[str, RemoteToolLookup] = {}

    def resolve(self, ref: str) -> RemoteRefCheck | None:
        for prefix, factory in _SOURCES.items():
            if ref.startswith(prefix):
                if prefix not in self._built:
                    self._built[prefix] = factory(self.tenant)
                return self._built[prefix].resolve(ref)
        return None
