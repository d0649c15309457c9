"""Reads of definitions for the engine and the API: loads by name and name lists."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from decimal import Decimal
from typing import Any, TypeVar

from django.conf import settings

from agents.credentials import model_key
from agents.documents import AgentDoc, CodeToolDoc, ModelDoc, PromptDoc
from agents.models import Agent, CodeTool, Definition, Model, Prompt
from agents.providers.base import ModelCapabilities, ModelPrices, ModelSpec
from agents.services import model_key_context, row_document
from common.errors import NotFound
from common.ids import new_id
from common.tokens import token_bump_now_and_after_commit, token_get
from tenancy.encryption import secret_decrypt
from tenancy.models import Tenant

EnvLookup = Callable[[str], str | None]
T = TypeVar("T")

# Parsed definitions, per process, per tenant and definitions version (the newest version
# of the most recently used tenants only): a flow reads its agent and prompts from here.
MAX_CACHED_TENANTS = 512
_cached: OrderedDict[Any, tuple[str, dict[tuple[str, str], Any]]] = OrderedDict()
_cached_lock = threading.Lock()
# Definitions versions already read in this definitions_scope(), by tenant id.
_scope: ContextVar[dict[Any, str] | None] = ContextVar("definitions_scope", default=None)


def _version_token(tenant: Tenant) -> str:
    return f"definitions:{tenant.id}"


@contextlib.contextmanager
def definitions_scope() -> Iterator[None]:
    """Within the block (a request, a flow), each tenant's definitions version is read once:
    the block sees one version throughout, or a newer one after it changes them itself."""
    token = _scope.set({})
    try:
        yield
    finally:
        _scope.reset(token)


def definitions_version(*, tenant: Tenant) -> str:
    """The current version of ``tenant``'s definitions (a change token, :mod:`common.tokens`;
    read once per :func:`definitions_scope`). While Redis is unreachable, a fresh token each
    call: definitions are read from the database, uncached, until it is back."""
    memo = _scope.get()
    if memo is not None and tenant.id in memo:
        return memo[tenant.id]
    version = token_get(_version_token(tenant))
    if version is None:
        return new_id().hex
    if memo is not None:
        memo[tenant.id] = version
    return version


def definitions_changed(*, tenant: Tenant) -> None:
    """Give ``tenant``'s definitions a new version now and again after commit, so no
    process keeps serving what it cached before the change."""
    memo = _scope.get()
    if memo is not None:
        memo.pop(tenant.id, None)
    token_bump_now_and_after_commit(_version_token(tenant))


def definitions_cached(
    *, tenant: Tenant, version: str, key: tuple[str, str], load: Callable[[], T]
) -> T:
    """``load()``'s value, cached for ``tenant`` at ``version`` (values are immutable
    documents or frozensets). Thread-safe; a newer version drops the tenant's older entries."""
    with _cached_lock:
        entry = _cached.get(tenant.id)
        if entry is not None and entry[0] == version and key in entry[1]:
            _cached.move_to_end(tenant.id)
            value: T = entry[1][key]
            return value
    value = load()
    with _cached_lock:
        entry = _cached.get(tenant.id)
        if entry is None or entry[0] != version:
            entry = (version, {})
            _cached[tenant.id] = entry
        entry[1][key] = value
        _cached.move_to_end(tenant.id)
        while len(_cached) > MAX_CACHED_TENANTS:
            _cached.popitem(last=False)
    return value


def platform_env(name: str) -> str | None:
    """The platform level of env lookups (settings.AGENT_PLATFORM_ENV_SECRETS)."""
    value: str | None = settings.AGENT_PLATFORM_ENV_SECRETS.get(name)
    return value


def _row(model: type[Definition], *, tenant: Tenant, name: str) -> Definition:
    row = model.objects.for_tenant(tenant).filter(name=name).first()
    if row is None:
        raise NotFound(f"no {model.KIND.replace('_', ' ')} named {name!r}")
    return row


def _document(model: type[Definition], *, tenant: Tenant, name: str, version: str | None) -> Any:
    """The parsed definition ``name`` from the per-process cache at ``version`` (the
    tenant's current one when None). Raises NotFound."""

    def load() -> Any:
        try:
            return row_document(_row(model, tenant=tenant, name=name))
        except NotFound:
            return None

    if version is None:
        version = definitions_version(tenant=tenant)
    doc = definitions_cached(tenant=tenant, version=version, key=(model.KIND, name), load=load)
    if doc is None:
        raise NotFound(f"no {model.KIND.replace('_', ' ')} named {name!r}")
    return doc


def _names(model: type[Definition], tenant: Tenant) -> list[str]:
    return list(model.objects.for_tenant(tenant).order_by("name").values_list("name", flat=True))


def model_names(*, tenant: Tenant) -> list[str]:
    return _names(Model, tenant)


def prompt_names(*, tenant: Tenant) -> list[str]:
    return _names(Prompt, tenant)


def agent_names(*, tenant: Tenant) -> list[str]:
    return _names(Agent, tenant)


def code_tool_names(*, tenant: Tenant) -> list[str]:
    return _names(CodeTool, tenant)


def prompt_load(*, tenant: Tenant, name: str, version: str | None = None) -> PromptDoc:
    """The prompt ``name`` (cached per definitions version). Raises NotFound."""
    doc = _document(Prompt, tenant=tenant, name=name, version=version)
    assert isinstance(doc, PromptDoc)
    return doc


def agent_load(*, tenant: Tenant, name: str, version: str | None = None) -> AgentDoc:
    """The agent ``name`` (cached per definitions version). Raises NotFound."""
    doc = _document(Agent, tenant=tenant, name=name, version=version)
    assert isinstance(doc, AgentDoc)
    return doc


def code_tool_load(*, tenant: Tenant, name: str, version: str | None = None) -> CodeToolDoc:
    """The code tool ``name`` (cached per definitions version). Raises NotFound."""
    doc = _document(CodeTool, tenant=tenant, name=name, version=version)
    assert isinstance(doc, CodeToolDoc)
    return doc


def no_env(name: str) -> str | None:
    """An env lookup that finds nothing."""
    return None


def model_load(*, tenant: Tenant, name: str, env: EnvLookup = no_env) -> ModelSpec:
    """A ready-to-call model: API key resolved, fallbacks resolved (one level, in order).

    The key comes from the model's credential, its stored key (decrypted) or
    ``env(api_key_env)`` (:func:`agents.credentials.model_key`); a thread passes its own env
    lookup (thread, agent, prompt and tenant levels: never the platform's).
    """
    return model_spec(model_rows(tenant=tenant, name=name), env=env)


ModelRows = tuple[Model, tuple[Model, ...]]


def model_rows(*, tenant: Tenant, name: str) -> ModelRows:
    """The model row ``name`` and its fallbacks' rows, in order (unknown ones left out)."""
    row = _row(Model, tenant=tenant, name=name)
    assert isinstance(row, Model)
    if not row.fallbacks:
        return row, ()
    by_name = {f.name: f for f in Model.objects.for_tenant(tenant).filter(name__in=row.fallbacks)}
    return row, tuple(by_name[n] for n in row.fallbacks if n in by_name)


def model_spec(rows: ModelRows, *, env: EnvLookup = no_env) -> ModelSpec:
    row, fallbacks = rows
    return _spec(row, env=env, fallbacks=tuple(_spec(f, env=env, fallbacks=()) for f in fallbacks))


def _price(value: Decimal | None) -> Decimal | None:
    return None if value is None else value.normalize()


def _spec(row: Model, *, env: EnvLookup, fallbacks: tuple[ModelSpec, ...]) -> ModelSpec:
    doc = row_document(row)
    assert isinstance(doc, ModelDoc)

    def stored() -> str:
        assert row.api_key_encrypted is not None
        return secret_decrypt(
            tenant=row.tenant,
            ciphertext=bytes(row.api_key_encrypted),
            context=model_key_context(row),
        ).decode()

    key = model_key(row, doc, env=env, stored=stored)
    capabilities = doc.capabilities
    return ModelSpec(
        name=doc.name,
        kind=doc.provider,
        model_id=doc.model_id,
        base_url=key.base_url,
        api_key=key.api_key,
        config=doc.config,
        capabilities=ModelCapabilities(
            max_context_tokens=capabilities.max_context_tokens,
            max_output_tokens=capabilities.max_output_tokens,
            vision=capabilities.vision,
            tool_calls=capabilities.tool_calls,
            streaming=capabilities.streaming,
        ),
        prices=ModelPrices(
            input_per_million=_price(doc.input_price),
            output_per_million=_price(doc.output_price),
            cached_per_million=_price(doc.cached_price),
        ),
        fallbacks=fallbacks,
        operator_endpoint=key.operator_endpoint,
        key_refused=key.refused,
    )
