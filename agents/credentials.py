"""Provider credentials: where a model's key comes from, and where that key may go.

Two kinds of credential, referenced by name from a model definition's ``credential``:

* **A tenant's own** (:class:`agents.models.ProviderCredential`): ``openai`` or ``anthropic``
  (the provider's official endpoint) or ``openai_compatible`` (the one base URL stored with
  it). The key is sealed with the tenant's data key and write-only: no answer, page or log
  shows it again. Saving a new key replaces the old one in one row update, so every call
  uses the old key until the new one commits, and the new one after.
* **The operator's** (``platform:openai``, ``platform:anthropic``, from
  ``settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS``): usable only by tenants granted them
  (:func:`platform_granted`) and only with the provider's official endpoint or a base URL
  the operator lists (``PROVIDER_BASE_URLS_ALLOWED``). A model that asks for anything else is
  refused when it is defined (a 400 naming ``base_url``) and again when it is called, before
  any traffic, so a row written before these rules cannot leak the key either.

Every key goes only to the endpoints of its credential: a model's ``base_url`` must be unset
(the credential's default endpoint) or one of them. A model with no credential (its own
stored ``api_key``, or ``api_key_env`` naming the thread's or the tenant's env) may name any
base URL the egress guard (:mod:`common.egress`) lets through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from django.conf import settings
from django.db import transaction

from agents.documents import PLATFORM_CREDENTIAL_PREFIX, ModelDoc, is_snake_case
from agents.models import CredentialProvider, Model, ProviderCredential
from agents.providers.base import OFFICIAL_BASE_URLS, KeyRefusal
from common.egress import destination_problem
from common.errors import Conflict, LimitExceeded, NotFound, ValidationFailed
from common.payloads import object_body, text_field
from common.time import now, to_us
from tenancy.encryption import secret_decrypt, secret_encrypt
from tenancy.models import Tenant

FIELDS: Final = ("name", "provider", "base_url", "description", "api_key")
MAX_CREDENTIALS: Final = 100  # per tenant
MAX_KEY_CHARS: Final = 4096
# The model provider each credential provider serves.
MODEL_PROVIDER: Final = {
    CredentialProvider.OPENAI: "openai",
    CredentialProvider.ANTHROPIC: "anthropic",
    CredentialProvider.OPENAI_COMPATIBLE: "openai",
}

EnvLookup = Callable[[str], str | None]


def url_key(url: str) -> str:
    """A base URL as compared: scheme and host lower-cased, no trailing slash."""
    head, sep, rest = url.strip().partition("://")
    host, slash, path = rest.partition("/")
    return f"{head.lower()}{sep}{host.lower()}{slash}{path}".rstrip("/")


@dataclass(frozen=True)
class CredentialTarget:
    """What one credential reference allows: the model provider it serves, and the
    endpoints its key may go to (the first is where a model without ``base_url`` goes).
    ``row`` is the tenant's credential; None for the operator's."""

    name: str
    provider: str
    endpoints: tuple[str, ...]
    row: ProviderCredential | None = field(default=None, compare=False, repr=False)

    @property
    def platform(self) -> bool:
        return self.row is None

    def secret(self) -> str:
        """The key: decrypted from the tenant's row, or the operator's from the settings."""
        if self.row is None:
            return str(settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS[self.provider]["api_key"])
        return credential_secret(self.row)

    def allows(self, base_url: str | None) -> bool:
        return base_url is None or url_key(base_url) in {url_key(e) for e in self.endpoints}

    def refusal(self, base_url: str) -> str:
        """Why ``base_url`` may not be used with this credential."""
        if self.platform:
            return (
                f"the platform credential {self.name!r} goes only to the provider's official "
                f"endpoint ({OFFICIAL_BASE_URLS[self.provider]}) or a base URL the operator "
                "lists in PROVIDER_BASE_URLS_ALLOWED; leave base_url unset or use your own "
                "credential"
            )
        return (
            f"credential {self.name!r} goes only to {', '.join(self.endpoints)}; leave "
            "base_url unset (an openai_compatible credential holds its own base URL)"
        )


# Platform credentials ------------------------------------------------------------------------


def platform_granted(tenant: Tenant) -> bool:
    """Whether ``tenant``'s models may use the operator's credentials: its admin toggle,
    or ``settings.PLATFORM_CREDENTIALS_GRANTED`` when the toggle is left unset."""
    if tenant.platform_credentials is not None:
        return bool(tenant.platform_credentials)
    return bool(settings.PLATFORM_CREDENTIALS_GRANTED)


def platform_targets() -> dict[str, CredentialTarget]:
    """The operator's credentials by reference (``platform:openai``), with their endpoints:
    the operator's own base URL (if set) first, then the official one, then the listed ones."""
    targets: dict[str, CredentialTarget] = {}
    for provider, entry in settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS.items():
        own = entry.get("base_url")
        endpoints = [*([own] if own else []), OFFICIAL_BASE_URLS[provider]]
        endpoints += [u for u in settings.PROVIDER_BASE_URLS_ALLOWED if u not in endpoints]
        name = f"{PLATFORM_CREDENTIAL_PREFIX}{provider}"
        targets[name] = CredentialTarget(name, provider, tuple(endpoints))
    return targets


def _tenant_target(row: ProviderCredential) -> CredentialTarget:
    if row.provider == CredentialProvider.OPENAI_COMPATIBLE:
        endpoints: tuple[str, ...] = (row.base_url,)
    else:
        endpoints = (OFFICIAL_BASE_URLS[row.provider],)
    provider = MODEL_PROVIDER[CredentialProvider(row.provider)]
    return CredentialTarget(row.name, provider, endpoints, row=row)


@dataclass(frozen=True)
class CredentialChoices:
    """The credential references a tenant's models may name (for definition validation)."""

    targets: Mapping[str, CredentialTarget]
    platform_known: frozenset[str]

    def problem(self, name: str) -> str | None:
        """Why ``name`` cannot be used, or None."""
        if name in self.targets:
            return None
        if name.startswith(PLATFORM_CREDENTIAL_PREFIX):
            if name not in self.platform_known:
                known = ", ".join(sorted(self.platform_known)) or "none"
                return f"the operator offers no platform credential {name!r} (offered: {known})"
            return (
                f"platform credentials are not granted to this tenant: ask the operator, or "
                f"store your own key as a credential and name it instead of {name!r}"
            )
        return f"unknown credential {name!r}"

    def check(self, name: str, *, provider: str, base_url: str | None) -> tuple[str, str] | None:
        """(field, message) when a model of ``provider`` at ``base_url`` may not use the
        credential ``name`` (agents.validation.CredentialLookup)."""
        problem = self.problem(name)
        if problem is not None:
            return "credential", problem
        target = self.targets[name]
        if target.provider != provider:
            return "credential", (
                f"credential {name!r} is for {target.provider}; this model's provider is {provider}"
            )
        if not target.allows(base_url):
            return "base_url", target.refusal(base_url or "")
        return None


def credential_choices(*, tenant: Tenant, only: str | None = None) -> CredentialChoices:
    """The credentials ``tenant``'s models may name (``only``: just that one of its own)."""
    platform = platform_targets()
    rows = ProviderCredential.objects.for_tenant(tenant)
    if only is not None:
        rows = rows.filter(name=only)
    targets = {row.name: _tenant_target(row) for row in rows}
    if platform_granted(tenant):
        targets.update(platform)
    return CredentialChoices(targets, frozenset(platform))


# The key of one model call ---------------------------------------------------------------------


@dataclass(frozen=True)
class ModelKey:
    """Where one model's call goes and with which key; ``refused`` says why it may not
    happen (then ``api_key`` is None)."""

    api_key: str | None
    base_url: str | None
    operator_endpoint: bool = False
    refused: KeyRefusal | None = None


def model_key(row: Model, doc: ModelDoc, *, env: EnvLookup, stored: Callable[[], str]) -> ModelKey:
    """The key and endpoint of ``row``'s calls. ``env`` looks up ``api_key_env`` (the
    thread's and the tenant's levels only: never the platform's); ``stored`` decrypts the
    model's own key. A credential that is gone or not allowed any more, or a platform
    credential with a base URL the operator did not allow, is refused here."""
    if doc.credential:
        return _credential_key(row, doc)
    if row.api_key_encrypted is not None:
        return ModelKey(stored(), doc.base_url)
    if doc.api_key_env:
        value = env(doc.api_key_env)
        if value is None:
            missing = KeyRefusal(
                f"model {doc.name!r} has no API key: it takes its key from the env variable "
                f"{doc.api_key_env!r}, which neither the thread nor the tenant defines "
                "(models never read the platform's env: store a credential and name it)",
                code="provider_no_api_key",
            )
            return ModelKey(None, doc.base_url, refused=missing)
        return ModelKey(value, doc.base_url)
    return ModelKey(None, doc.base_url)


def _credential_key(row: Model, doc: ModelDoc) -> ModelKey:
    """The key of a model that names a credential, checked as its definition was
    (:meth:`CredentialChoices.check`), since the credential, the grant or the operator's
    settings may have changed since, or the row may predate these rules."""
    name = doc.credential
    assert name is not None
    choices = credential_choices(tenant=row.tenant, only=name)
    found = choices.check(name, provider=doc.provider, base_url=doc.base_url)
    if found is not None:
        where, message = found
        refusal = KeyRefusal(f"model {doc.name!r}: {where}: {message}")
        return ModelKey(None, doc.base_url, refused=refusal)
    target = choices.targets[name]
    endpoint = doc.base_url or target.endpoints[0]
    return ModelKey(target.secret(), endpoint, operator_endpoint=target.platform)


# Tenant credentials: services ------------------------------------------------------------------


def _context(row: ProviderCredential) -> str:
    return f"agents.ProviderCredential:{row.id}:api_key"


def credential_secret(row: ProviderCredential) -> str:
    return secret_decrypt(
        tenant=row.tenant, ciphertext=bytes(row.api_key_encrypted), context=_context(row)
    ).decode()


def credential_json(row: ProviderCredential) -> dict[str, Any]:
    """A credential as answers show it: never its key."""
    return {
        "id": str(row.id),
        "name": row.name,
        "provider": row.provider,
        "base_url": row.base_url or None,
        "description": row.description,
        "platform": False,
        "created_at": to_us(row.created_at),
        "updated_at": to_us(row.updated_at),
        "rotated_at": to_us(row.rotated_at) if row.rotated_at else None,
    }


def platform_credential_json(target: CredentialTarget) -> dict[str, Any]:
    """A granted platform credential as the tenant's listing shows it: its name and where
    it may go, never its key."""
    return {
        "id": None,
        "name": target.name,
        "provider": target.provider,
        "base_url": target.endpoints[0],
        "description": "the operator's key; also allowed: " + ", ".join(target.endpoints[1:])
        if len(target.endpoints) > 1
        else "the operator's key",
        "platform": True,
        "created_at": None,
        "updated_at": None,
        "rotated_at": None,
    }


def credential_listing(*, tenant: Tenant) -> list[dict[str, Any]]:
    """The tenant's credentials, then the platform credentials granted to it."""
    rows = [credential_json(row) for row in ProviderCredential.objects.for_tenant(tenant)]
    if platform_granted(tenant):
        rows += [platform_credential_json(t) for t in platform_targets().values()]
    return rows


def credential_get(*, tenant: Tenant, name: str) -> ProviderCredential:
    row = ProviderCredential.objects.for_tenant(tenant).filter(name=name).first()
    if row is None:
        raise NotFound(f"no credential named {name!r}")
    return row


def _text(data: Mapping[str, Any], name: str, *, max_chars: int, required: bool) -> str:
    value = data.get(name)
    if value is None:
        if required:
            raise ValidationFailed(f"{name} is required", field=name)
        return ""
    return text_field(value, name, max_chars=max_chars)


def _key(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationFailed("api_key must be a non-empty string", field="api_key")
    if len(value) > MAX_KEY_CHARS:
        raise ValidationFailed(
            f"api_key is longer than {MAX_KEY_CHARS} characters", field="api_key"
        )
    return value.strip()


def _base_url(provider: str, value: str) -> str:
    if provider != CredentialProvider.OPENAI_COMPATIBLE:
        if value:
            raise ValidationFailed(
                f"a {provider} credential goes to the official endpoint "
                f"({OFFICIAL_BASE_URLS[provider]}); base_url is only for openai_compatible",
                field="base_url",
            )
        return ""
    if not value:
        raise ValidationFailed(
            "an openai_compatible credential needs its base_url", field="base_url"
        )
    if any(c.isspace() for c in value):
        raise ValidationFailed("base_url must be an http(s) URL", field="base_url")
    problem = destination_problem(value)  # the scheme, the host, a refused address
    if problem is not None:
        raise ValidationFailed(problem, field="base_url")
    return value


@transaction.atomic
def credential_save(
    *, tenant: Tenant, data: Mapping[str, Any], current: ProviderCredential | None = None
) -> ProviderCredential:
    """Create a credential (``current`` None: ``name``, ``provider``, ``api_key`` required) or
    change ``current``: the fields sent replace the stored ones; a new ``api_key`` replaces
    the old one in the same row update (rotation: calls use the old key until it commits).
    A rename or a new endpoint must not break a model that names the credential."""
    from agents.services import lock_definitions  # which reads credential_choices

    body = object_body(data, FIELDS)
    lock_definitions(tenant=tenant)
    rows = ProviderCredential.objects.for_tenant(tenant)
    name = _text(body, "name", max_chars=64, required=current is None) or (
        current.name if current else ""
    )
    if not is_snake_case(name):
        raise ValidationFailed(
            "name must be snake_case: a lower-case letter, then letters, digits or _ (<= 64)",
            field="name",
        )
    provider = _text(body, "provider", max_chars=24, required=current is None) or (
        current.provider if current else ""
    )
    if provider not in CredentialProvider.values:
        raise ValidationFailed(
            f"provider must be one of {', '.join(CredentialProvider.values)}", field="provider"
        )
    if "base_url" in body or current is None:
        base_url = _text(body, "base_url", max_chars=500, required=False)
    else:  # kept, unless the new provider has no base URL of its own
        compatible = provider == CredentialProvider.OPENAI_COMPATIBLE
        base_url = current.base_url if compatible else ""
    base_url = _base_url(provider, base_url)
    if current is None and "api_key" not in body:
        raise ValidationFailed("api_key is required", field="api_key")
    key = _key(body["api_key"]) if "api_key" in body else None
    if name != (current.name if current else None) and rows.filter(name=name).exists():
        raise Conflict(f"a credential named {name!r} already exists", field="name")
    if current is None:
        if rows.count() >= MAX_CREDENTIALS:
            raise LimitExceeded(f"a tenant has at most {MAX_CREDENTIALS} credentials")
        row = ProviderCredential(tenant=tenant)
    else:
        row = current
        _still_usable(tenant=tenant, row=row, name=name, provider=provider, base_url=base_url)
    row.name, row.provider, row.base_url = name, provider, base_url
    if "description" in body or current is None:
        row.description = _text(body, "description", max_chars=500, required=False)
    if key is not None:
        if current is not None:
            row.rotated_at = now()
        row.api_key_encrypted = secret_encrypt(
            tenant=tenant, plaintext=key.encode(), context=_context(row)
        )
    row.updated_at = now()
    row.save()
    return row


def _users(*, tenant: Tenant, name: str) -> list[str]:
    return list(
        Model.objects.for_tenant(tenant).filter(credential=name).values_list("name", flat=True)
    )


def _still_usable(
    *, tenant: Tenant, row: ProviderCredential, name: str, provider: str, base_url: str
) -> None:
    users = _users(tenant=tenant, name=row.name)
    if not users:
        return
    if name != row.name:
        raise Conflict(
            f"credential {row.name!r} is named by model(s) {', '.join(users)}: rename those first",
            field="name",
        )
    if MODEL_PROVIDER[CredentialProvider(provider)] != MODEL_PROVIDER[
        CredentialProvider(row.provider)
    ] or (base_url != row.base_url):
        raise Conflict(
            f"credential {row.name!r} is named by model(s) {', '.join(users)}: a new provider "
            "or base_url would send their calls elsewhere; create another credential",
            field="provider" if provider != row.provider else "base_url",
        )


@transaction.atomic
def credential_delete(*, tenant: Tenant, row: ProviderCredential) -> None:
    """Delete a credential no model names; otherwise Conflict naming them."""
    from agents.services import lock_definitions

    lock_definitions(tenant=tenant)
    users = _users(tenant=tenant, name=row.name)
    if users:
        raise Conflict(f"credential {row.name!r} is still named by model(s) {', '.join(users)}")
    row.delete()
