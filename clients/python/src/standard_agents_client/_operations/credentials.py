"""Provider credentials: the keys models name in their ``credential``. Keys are
write-only: sent here, never answered."""

from __future__ import annotations

from standard_agents_client._call import (
    Call,
    body,
    query,
    read_json,
    read_nothing,
    read_page,
    segment,
)
from standard_agents_client.pagination import Page
from standard_agents_client.types import Credential, CredentialProvider


def credential_list(
    *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[Credential]]:
    """The tenant's credentials by name, then the operator's granted to it (``platform``
    true, named ``platform:openai``…); never a key."""
    return Call("GET", "/credentials", read_page, query(limit=limit, cursor=cursor))


def credential_create(
    name: str,
    *,
    provider: CredentialProvider,
    api_key: str,
    base_url: str | None = None,
    description: str | None = None,
) -> Call[Credential]:
    """Store a credential (admins). ``openai`` and ``anthropic`` keys go to the provider's
    official endpoint; an ``openai_compatible`` one needs ``base_url``, the one endpoint
    its key goes to."""
    payload = body(
        name=name, provider=provider, api_key=api_key, base_url=base_url,
        description=description,
    )  # fmt: skip
    return Call("POST", "/credentials", read_json, json=payload)


def credential_get(name: str) -> Call[Credential]:
    """One of the tenant's credentials, by name."""
    return Call("GET", f"/credentials/{segment(name)}", read_json)


def credential_update(
    name: str,
    *,
    new_name: str | None = None,
    provider: CredentialProvider | None = None,
    base_url: str | None = None,
    description: str | None = None,
    api_key: str | None = None,
) -> Call[Credential]:
    """Change a credential (admins; merged). A new ``api_key`` replaces the key in place:
    calls use the old key until it is saved, the new one after. A rename, or a provider or
    ``base_url`` that would send a model's calls elsewhere, is a ``Conflict`` while a model
    names the credential."""
    payload = body(
        name=new_name, provider=provider, base_url=base_url, description=description,
        api_key=api_key,
    )  # fmt: skip
    return Call("PATCH", f"/credentials/{segment(name)}", read_json, json=payload)


def credential_rotate(name: str, api_key: str) -> Call[Credential]:
    """Replace a credential's key (admins): ``update(name, api_key=...)``."""
    return credential_update(name, api_key=api_key)


def credential_delete(name: str) -> Call[None]:
    """Delete a credential (admins; ``Conflict`` while a model names it)."""
    return Call("DELETE", f"/credentials/{segment(name)}", read_nothing)
