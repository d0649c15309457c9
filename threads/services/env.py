"""Env variables: thread and tenant rows, and the resolver behind ``state.env(name)``.

Lookup order (ARCHITECTURE, settled): **thread > tool-config > agent > prompt > tenant >
platform**. The tool-config, agent and prompt levels are plain mappings the caller passes
in (the engine knows the active prompt, agent and tool); the tenant level is
:class:`TenantEnv`; the platform level is :func:`agents.selectors.platform_env`, and only
the operator's registry code (Python tools, hooks, effects, endpoints: ``state.env``) reads
it. Everything a tenant writes or chooses (model keys, prompt text, ``optional`` flags, code
tools, run-code, code mode) resolves without it: an :class:`EnvResolver` has no platform
level unless it is given one.

Types (spec §11): a value is ``text`` only when the winning source marks it text (a thread
or tenant row of type text); agent, prompt, tool-config and platform values are ``secret``.

Values are stored encrypted with the tenant data key, bound to
``threads.ThreadEnv:<thread id>:<name>`` or ``threads.TenantEnv:<tenant id>:<name>``, and
are never returned by the listing functions here (names and types only).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from agents.graph import scoped_variable_names
from agents.selectors import no_env
from common.errors import LimitExceeded, NotFound, ValidationFailed
from common.time import now_us
from tenancy.encryption import secret_decrypt, secret_encrypt
from tenancy.models import Tenant
from threads.models import EnvType, TenantEnv, Thread, ThreadEnv
from threads.services.fence import terminated_check

EnvTypeName = Literal["text", "secret"]

MAX_ENV_NAME_LENGTH = 128
MAX_ENV_VALUE_BYTES = 64 * 1024  # UTF-8 bytes of one value
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class EnvNotFound(NotFound):
    """No level defines the variable (spec message: ``Environment variable not found: NAME``)."""

    code = "env_not_found"


@dataclass(frozen=True)
class EnvEntry:
    """A variable as listings show it: never its value."""

    name: str
    type: EnvTypeName
    updated_at: int


@dataclass(frozen=True)
class EnvInput:
    """A value to store, with its type (None: keep an existing name's, secret for a new one)."""

    value: str
    type: str | None = None


@dataclass(frozen=True)
class EnvValue:
    value: str
    type: EnvTypeName


# Validation ------------------------------------------------------------------------------


def env_name_check(name: object) -> str:
    """``name`` if it is an env name (letters, digits, ``_``, no leading digit, <= 128)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValidationFailed(
            "an environment variable name is letters, digits and underscores, "
            "not starting with a digit",
            field="name",
        )
    if len(name) > MAX_ENV_NAME_LENGTH:
        raise LimitExceeded(
            f"environment variable name is {len(name)} characters; the cap "
            f"MAX_ENV_NAME_LENGTH is {MAX_ENV_NAME_LENGTH}",
            field="name",
        )
    return name


def _value_bytes(value: object) -> bytes:
    if not isinstance(value, str):
        raise ValidationFailed("an environment variable value must be a string", field="value")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValidationFailed("value is not valid Unicode", field="value") from error
    if len(data) > MAX_ENV_VALUE_BYTES:
        raise LimitExceeded(
            f"environment variable value is {len(data)} bytes; the cap MAX_ENV_VALUE_BYTES "
            f"is {MAX_ENV_VALUE_BYTES}",
            field="value",
        )
    return data


def _type_check(type: object) -> EnvTypeName | None:
    if type is None or type == "text" or type == "secret":
        return type  # type: ignore[return-value]
    raise ValidationFailed("type must be 'text' or 'secret'", field="type")


def _as_type(stored: str) -> EnvTypeName:
    return "text" if stored == EnvType.TEXT else "secret"


def env_entry_of(row: ThreadEnv | TenantEnv) -> EnvEntry:
    """What a listing shows of a row of :func:`thread_env_rows` or :func:`tenant_env_rows`."""
    return EnvEntry(row.name, _as_type(row.type), row.updated_at)


# Thread env ------------------------------------------------------------------------------


def _thread_context(thread: Thread, name: str) -> str:
    return f"threads.ThreadEnv:{thread.id}:{name}"


def _thread_value(thread: Thread, row: ThreadEnv) -> str:
    data = secret_decrypt(
        tenant=thread.tenant,
        ciphertext=bytes(row.value_encrypted),
        context=_thread_context(thread, row.name),
    )
    return data.decode("utf-8")


@transaction.atomic
def thread_env_set(*, thread: Thread, name: str, value: str, type: str | None = None) -> EnvEntry:
    """Create or replace a thread variable (spec ``setEnv``; a blank value is allowed).

    ``type`` is ``"text"``, ``"secret"`` or None; None keeps an existing variable's type
    and makes a new variable ``secret``.
    Raises ValidationFailed (``name``/``value``/``type``) or LimitExceeded. Propagation to
    descendant threads (minus their scoped names) is the caller's: see
    :func:`thread_env_copy`.
    """
    terminated_check(thread=thread, what="env variables")
    env_name_check(name)
    data = _value_bytes(value)
    wanted = _type_check(type)
    sealed = secret_encrypt(
        tenant=thread.tenant, plaintext=data, context=_thread_context(thread, name)
    )
    return _env_upsert(
        ThreadEnv.objects.for_tenant(thread.tenant).filter(thread=thread),
        lambda kind: ThreadEnv(tenant=thread.tenant, thread=thread, name=name, type=kind),
        name=name,
        sealed=sealed,
        wanted=wanted,
    )


def _env_upsert(
    rows: QuerySet[Any],
    new_row: Callable[[str], ThreadEnv | TenantEnv],
    *,
    name: str,
    sealed: bytes,
    wanted: EnvTypeName | None,
) -> EnvEntry:
    """Create or replace the variable ``name`` among ``rows`` (thread or tenant env)."""
    row = rows.select_for_update().filter(name=name).first()
    updated_at = now_us()
    if row is None:
        row = new_row(wanted or "secret")
    elif wanted is not None:
        row.type = wanted
    row.value_encrypted = sealed
    row.updated_at = updated_at
    try:
        with transaction.atomic():
            row.save()
    except IntegrityError:  # a concurrent writer created the name first: overwrite it
        row = rows.select_for_update().get(name=name)
        row.value_encrypted = sealed
        row.updated_at = updated_at
        if wanted is not None:
            row.type = wanted
        row.save(update_fields=["value_encrypted", "updated_at", "type"])
    return EnvEntry(name=name, type=_as_type(row.type), updated_at=updated_at)


@transaction.atomic
def thread_env_delete(*, thread: Thread, name: str) -> bool:
    """Remove a thread variable; True when there was one."""
    terminated_check(thread=thread, what="env variables")
    env_name_check(name)
    deleted, _ = (
        ThreadEnv.objects.for_tenant(thread.tenant).filter(thread=thread, name=name).delete()
    )
    return deleted > 0


def thread_env_rows(*, thread: Thread) -> QuerySet[ThreadEnv]:
    """The thread's variable rows by name (show them with :func:`env_entry_of`)."""
    return ThreadEnv.objects.for_tenant(thread.tenant).filter(thread=thread).order_by("name")


def thread_env_names(*, thread: Thread) -> list[EnvEntry]:
    """The thread's variables by name: names and types, never values."""
    return [env_entry_of(row) for row in thread_env_rows(thread=thread)]


def thread_env_get(*, thread: Thread, name: str) -> EnvValue | None:
    """The thread level alone (decrypted), or None. For the engine, never for API output."""
    row = ThreadEnv.objects.for_tenant(thread.tenant).filter(thread=thread, name=name).first()
    if row is None:
        return None
    return EnvValue(_thread_value(thread, row), _as_type(row.type))


@transaction.atomic
def thread_env_copy(*, source: Thread, target: Thread, exclude: Iterable[str] = ()) -> list[str]:
    """Copy ``source``'s variables onto ``target`` (re-encrypted for it), skipping ``exclude``
    (a child's scoped names). Used when a child thread inherits env and when ``setEnv``
    propagates to descendants. Returns the names copied."""
    if source.tenant_id != target.tenant_id:
        raise ValidationFailed("env can only be copied within one tenant", field="target")
    skipped = set(exclude)
    copied: list[str] = []
    for row in ThreadEnv.objects.for_tenant(source.tenant).filter(thread=source):
        if row.name in skipped:
            continue
        thread_env_set(
            thread=target, name=row.name, value=_thread_value(source, row),
            type=_as_type(row.type),
        )  # fmt: skip
        copied.append(row.name)
    return copied


# Tenant env ------------------------------------------------------------------------------


def _tenant_context(tenant: Tenant, name: str) -> str:
    return f"threads.TenantEnv:{tenant.id}:{name}"


@transaction.atomic
def tenant_env_set(*, tenant: Tenant, name: str, value: str, type: str | None = None) -> EnvEntry:
    """Create or replace a tenant-wide variable; same rules as :func:`thread_env_set`."""
    env_name_check(name)
    data = _value_bytes(value)
    wanted = _type_check(type)
    sealed = secret_encrypt(tenant=tenant, plaintext=data, context=_tenant_context(tenant, name))
    return _env_upsert(
        TenantEnv.objects.for_tenant(tenant),
        lambda kind: TenantEnv(tenant=tenant, name=name, type=kind),
        name=name,
        sealed=sealed,
        wanted=wanted,
    )


@transaction.atomic
def tenant_env_delete(*, tenant: Tenant, name: str) -> bool:
    env_name_check(name)
    deleted, _ = TenantEnv.objects.for_tenant(tenant).filter(name=name).delete()
    return deleted > 0


def tenant_env_rows(*, tenant: Tenant) -> QuerySet[TenantEnv]:
    """The tenant's variable rows by name (show them with :func:`env_entry_of`)."""
    return TenantEnv.objects.for_tenant(tenant).order_by("name")


def tenant_env_names(*, tenant: Tenant) -> list[EnvEntry]:
    return [env_entry_of(row) for row in tenant_env_rows(tenant=tenant)]


def tenant_env_get(*, tenant: Tenant, name: str) -> EnvValue | None:
    row = TenantEnv.objects.for_tenant(tenant).filter(name=name).first()
    if row is None:
        return None
    data = secret_decrypt(
        tenant=tenant,
        ciphertext=bytes(row.value_encrypted),
        context=_tenant_context(tenant, name),
    )
    return EnvValue(data.decode("utf-8"), _as_type(row.type))


# Resolution ------------------------------------------------------------------------------


def _empty() -> Mapping[str, str]:
    return {}


@dataclass(frozen=True)
class EnvResolver:
    """``state.env`` / ``state.envType`` for one thread and the active tool, agent and prompt.

    Each call reads the database (no caching), so a ``setEnv`` earlier in the same
    execution is seen by the next ``env``.
    """

    thread: Thread
    tool_env: Mapping[str, str] = field(default_factory=_empty)
    agent_env: Mapping[str, str] = field(default_factory=_empty)
    prompt_env: Mapping[str, str] = field(default_factory=_empty)
    platform: Callable[[str], str | None] = no_env

    def resolve(self, name: str) -> EnvValue | None:
        """The winning (value, type), or None when no level has ``name``."""
        found = thread_env_get(thread=self.thread, name=name)
        if found is not None:
            return found
        for level in (self.tool_env, self.agent_env, self.prompt_env):
            if name in level:
                return EnvValue(level[name], "secret")
        found = tenant_env_get(tenant=self.thread.tenant, name=name)
        if found is not None:
            return found
        value = self.platform(name)
        return None if value is None else EnvValue(value, "secret")

    def value(self, name: str) -> str:
        """The value; raises EnvNotFound ``Environment variable not found: NAME``."""
        found = self.resolve(name)
        if found is None:
            raise EnvNotFound(f"Environment variable not found: {name}", field="name")
        return found.value

    def type(self, name: str) -> EnvTypeName:
        """``text`` only when the winning source marks it text; ``secret`` otherwise,
        including when no level has the name (the safe default)."""
        found = self.resolve(name)
        return "secret" if found is None else found.type


def scoped_env_names(*, thread: Thread) -> set[str]:
    """Names declared ``scoped: true`` anywhere in the graph of ``thread``'s agent: those
    come only from the spawn, never from a parent (DIGEST §11)."""
    return scoped_variable_names(tenant=thread.tenant, agent_name=thread.agent_name)


@transaction.atomic
def thread_env_set_everywhere(
    *, thread: Thread, name: str, value: str, type: str | None = None
) -> list[Thread]:
    """``setEnv``: write ``thread``'s env, then every non-terminated descendant's, except
    descendants whose agent declares ``name`` scoped. Returns the descendants written."""
    thread_env_set(thread=thread, name=name, value=value, type=type)
    written: list[Thread] = []
    frontier = [thread]
    while frontier:
        children = list(Thread.objects.filter(parent__in=frontier, terminated_at__isnull=True))
        for child in children:
            if name not in scoped_env_names(thread=child):
                thread_env_set(thread=child, name=name, value=value, type=type)
                written.append(child)
        frontier = children
    return written
