"""The API's operations grouped by resource, declared once for both clients.

A resource's methods are descriptors over the builders of ``_operations/``: on a
:class:`~standard_agents_client.Client` (``Resource[Sync]``) a method answers its result,
on an :class:`~standard_agents_client.AsyncClient` (``Resource[Async]``) a coroutine of
it; a list's ``iter`` is an iterator or an async iterator. The client does the sending
(``_send``, ``_items``, ``_follow``, ``_download``), so the two share every operation's
description and differ only in their I/O.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Generator, Iterator
from typing import Any, Generic, ParamSpec, TypeVar, final, overload

from standard_agents_client._call import Call, Download
from standard_agents_client._operations import (
    access,
    credentials,
    storage,
    tenant,
    threads,
    turns,
    work,
)
from standard_agents_client._streams import Follow
from standard_agents_client.pagination import Page
from standard_agents_client.types import Event

P = ParamSpec("P")
T = TypeVar("T")


@final
class Sync:
    """The mode of a :class:`~standard_agents_client.Client`'s resources."""


@final
class Async:
    """The mode of an :class:`~standard_agents_client.AsyncClient`'s resources."""


M = TypeVar("M", Sync, Async)


class Resource(Generic[M]):
    """A group of the API's operations, sent by the client it belongs to."""

    def __init__(self, client: Any) -> None:
        self._client = client


def _bound(resource: Resource[Any], build: Callable[..., Any], send: str) -> Any:
    """``build``'s signature and docstring, sending what it builds with the client's
    ``send`` method (a result or a coroutine, an iterator or an async iterator)."""
    sender = getattr(resource._client, send)

    @functools.wraps(build)
    def method(*args: Any, **kwargs: Any) -> Any:
        return sender(build(*args, **kwargs))

    return method


class operation(Generic[P, T]):  # noqa: N801 (a descriptor used like a decorator)
    """A method that sends one request and answers its result."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build

    @overload
    def __get__(self, resource: None, owner: type[Any]) -> operation[P, T]: ...
    @overload
    def __get__(self, resource: Resource[Sync], owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(
        self, resource: Resource[Async], owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, resource: Resource[Any] | None, owner: type[Any]) -> Any:
        return self if resource is None else _bound(resource, self.build, "_send")


class items(Generic[P, T]):  # noqa: N801
    """A method that walks every page of a list, item by item, fetching each page as the
    iteration reaches it."""

    def __init__(self, build: Callable[P, Call[Page[T]]]) -> None:
        self.build = build

    @overload
    def __get__(self, resource: None, owner: type[Any]) -> items[P, T]: ...
    @overload
    def __get__(self, resource: Resource[Sync], owner: type[Any]) -> Callable[P, Iterator[T]]: ...
    @overload
    def __get__(
        self, resource: Resource[Async], owner: type[Any]
    ) -> Callable[P, AsyncIterator[T]]: ...
    def __get__(self, resource: Resource[Any] | None, owner: type[Any]) -> Any:
        return self if resource is None else _bound(resource, self.build, "_items")


class streamed(Generic[P]):  # noqa: N801
    """A method that follows an event stream, reconnecting after drops: a generator, so
    ``close()`` (``aclose()``) ends it and its connection early."""

    def __init__(self, build: Callable[P, Follow]) -> None:
        self.build = build

    @overload
    def __get__(self, resource: None, owner: type[Any]) -> streamed[P]: ...
    @overload
    def __get__(
        self, resource: Resource[Sync], owner: type[Any]
    ) -> Callable[P, Generator[Event, None, None]]: ...
    @overload
    def __get__(
        self, resource: Resource[Async], owner: type[Any]
    ) -> Callable[P, AsyncGenerator[Event, None]]: ...
    def __get__(self, resource: Resource[Any] | None, owner: type[Any]) -> Any:
        return self if resource is None else _bound(resource, self.build, "_follow")


class downloaded(Generic[P]):  # noqa: N801
    """A method that streams a download to a file and answers the bytes written."""

    def __init__(self, build: Callable[P, Download]) -> None:
        self.build = build

    @overload
    def __get__(self, resource: None, owner: type[Any]) -> downloaded[P]: ...
    @overload
    def __get__(self, resource: Resource[Sync], owner: type[Any]) -> Callable[P, int]: ...
    @overload
    def __get__(
        self, resource: Resource[Async], owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, int]]: ...
    def __get__(self, resource: Resource[Any] | None, owner: type[Any]) -> Any:
        return self if resource is None else _bound(resource, self.build, "_download")


# Access ---------------------------------------------------------------------------------------


class ApiKeys(Resource[M]):
    """The tenant's API keys (admins)."""

    list = operation(access.api_key_list)
    iter = items(access.api_key_list)
    create = operation(access.api_key_create)
    get = operation(access.api_key_get)
    revoke = operation(access.api_key_revoke)


# Threads and what they hold -------------------------------------------------------------------


class Threads(Resource[M]):
    """Threads: instances of agents."""

    create = operation(threads.thread_create)
    create_and_wait = operation(threads.thread_create_and_wait)
    get = operation(threads.thread_get)
    list = operation(threads.thread_list)
    iter = items(threads.thread_list)
    update = operation(threads.thread_update)
    delete = operation(threads.thread_delete)
    stop = operation(threads.thread_stop)
    terminate = operation(threads.thread_terminate)
    continue_ = operation(threads.thread_continue)
    run_code = operation(threads.thread_run_code)


class Messages(Resource[M]):
    """A thread's messages."""

    list = operation(threads.message_list)
    iter = items(threads.message_list)
    send = operation(threads.message_send)
    inject = operation(threads.message_inject)
    get = operation(threads.message_get)
    update = operation(threads.message_update)
    delete = operation(threads.message_delete)


class Turns(Resource[M]):
    """Turns: submitted input cycles of threads, run one at a time per thread."""

    submit = operation(turns.turn_submit)
    wait = operation(turns.turn_wait)
    submit_and_wait = operation(turns.turn_submit_and_wait)
    stream = streamed(turns.turn_stream)
    get = operation(turns.turn_get)
    list = operation(turns.turn_list)
    iter = items(turns.turn_list)
    cancel = operation(turns.turn_cancel)
    remove = operation(turns.turn_remove)
    promote = operation(turns.turn_promote)


class Events(Resource[M]):
    """A thread's event log: paged, or followed live."""

    list = operation(turns.event_list)
    iter = items(turns.event_list)
    follow = streamed(turns.event_follow)


class Logs(Resource[M]):
    """A thread's model and tool call records."""

    list = operation(turns.log_list)
    iter = items(turns.log_list)
    get = operation(turns.log_get)


class Files(Resource[M]):
    """A thread's file system."""

    upload = operation(storage.file_upload)
    download = operation(storage.file_download)
    download_to = downloaded(storage.file_download_to)
    stat = operation(storage.file_stat)
    list = operation(storage.file_list)
    iter = items(storage.file_list)
    mkdir = operation(storage.file_mkdir)
    delete = operation(storage.file_delete)
    thumbnail = operation(storage.file_thumbnail)
    stats = operation(storage.file_stats)
    grep = operation(storage.file_grep)
    find = operation(storage.file_find)


class Kv(Resource[M]):
    """A thread's durable KV store."""

    list = operation(storage.kv_list)
    iter = items(storage.kv_list)
    get = operation(storage.kv_get)
    set = operation(storage.kv_set)
    delete = operation(storage.kv_delete)


class ThreadEnv(Resource[M]):
    """A thread's env variables (values are write-only)."""

    list = operation(storage.thread_env_list)
    iter = items(storage.thread_env_list)
    set = operation(storage.thread_env_set)
    delete = operation(storage.thread_env_delete)


class TenantEnv(Resource[M]):
    """The tenant's env variables, the tenant level of env lookups (admins write)."""

    list = operation(storage.tenant_env_list)
    iter = items(storage.tenant_env_list)
    set = operation(storage.tenant_env_set)
    delete = operation(storage.tenant_env_delete)


class Actions(Resource[M]):
    """The decisions a thread's turns wait for a person to make."""

    list = operation(work.action_list)
    iter = items(work.action_list)
    get = operation(work.action_get)
    respond = operation(work.action_respond)


class Effects(Resource[M]):
    """A thread's scheduled effects."""

    list = operation(work.effect_list)
    iter = items(work.effect_list)
    get = operation(work.effect_get)
    cancel = operation(work.effect_cancel)
    run = operation(work.effect_run)
    replay = operation(work.effect_replay)


class Subagents(Resource[M]):
    """A thread's subagents and the variable-bootstrap flow."""

    list = operation(work.child_list)
    iter = items(work.child_list)
    variable_request = operation(work.variable_request_get)
    provide_variables = operation(work.variable_request_complete)


# The tenant's configuration -------------------------------------------------------------------


class Schedules(Resource[M]):
    """Recurring schedules."""

    list = operation(tenant.schedule_list)
    iter = items(tenant.schedule_list)
    create = operation(tenant.schedule_create)
    get = operation(tenant.schedule_get)
    update = operation(tenant.schedule_update)
    delete = operation(tenant.schedule_delete)
    pause = operation(tenant.schedule_pause)
    resume = operation(tenant.schedule_resume)


class Webhooks(Resource[M]):
    """Signed webhooks (admins)."""

    list = operation(tenant.webhook_list)
    iter = items(tenant.webhook_list)
    create = operation(tenant.webhook_create)
    get = operation(tenant.webhook_get)
    update = operation(tenant.webhook_update)
    delete = operation(tenant.webhook_delete)
    rotate_secret = operation(tenant.webhook_rotate_secret)
    deliveries = operation(tenant.webhook_deliveries)
    iter_deliveries = items(tenant.webhook_deliveries)
    redeliver = operation(tenant.webhook_redeliver)


class Models(Resource[M]):
    """Model definitions, by name."""

    list = operation(tenant.MODELS.list)
    iter = items(tenant.MODELS.list)
    get = operation(tenant.MODELS.get)
    create = operation(tenant.MODELS.create)
    replace = operation(tenant.MODELS.replace)
    update = operation(tenant.MODELS.update)
    delete = operation(tenant.MODELS.delete)


class Prompts(Resource[M]):
    """Prompt definitions, by name."""

    list = operation(tenant.PROMPTS.list)
    iter = items(tenant.PROMPTS.list)
    get = operation(tenant.PROMPTS.get)
    create = operation(tenant.PROMPTS.create)
    replace = operation(tenant.PROMPTS.replace)
    update = operation(tenant.PROMPTS.update)
    delete = operation(tenant.PROMPTS.delete)


class Agents(Resource[M]):
    """Agent definitions, by name."""

    list = operation(tenant.AGENTS.list)
    iter = items(tenant.AGENTS.list)
    get = operation(tenant.AGENTS.get)
    create = operation(tenant.AGENTS.create)
    replace = operation(tenant.AGENTS.replace)
    update = operation(tenant.AGENTS.update)
    delete = operation(tenant.AGENTS.delete)


class CodeTools(Resource[M]):
    """Code tool definitions, by name."""

    list = operation(tenant.CODE_TOOLS.list)
    iter = items(tenant.CODE_TOOLS.list)
    get = operation(tenant.CODE_TOOLS.get)
    create = operation(tenant.CODE_TOOLS.create)
    replace = operation(tenant.CODE_TOOLS.replace)
    update = operation(tenant.CODE_TOOLS.update)
    delete = operation(tenant.CODE_TOOLS.delete)


class Bundles(Resource[M]):
    """The tenant's definitions as one document: export and import."""

    export = operation(tenant.bundle_export)
    export_yaml = operation(tenant.bundle_export_yaml)
    import_ = operation(tenant.bundle_import)


class PermissionRules(Resource[M]):
    """The tenant's permission rules for tool calls (admins write)."""

    list = operation(tenant.permission_rule_list)
    iter = items(tenant.permission_rule_list)
    create = operation(tenant.permission_rule_create)
    get = operation(tenant.permission_rule_get)
    replace = operation(tenant.permission_rule_replace)
    update = operation(tenant.permission_rule_update)
    delete = operation(tenant.permission_rule_delete)


class Credentials(Resource[M]):
    """Provider credentials, by name (admins write; keys are write-only)."""

    list = operation(credentials.credential_list)
    iter = items(credentials.credential_list)
    create = operation(credentials.credential_create)
    get = operation(credentials.credential_get)
    update = operation(credentials.credential_update)
    rotate = operation(credentials.credential_rotate)
    delete = operation(credentials.credential_delete)


class Registry(Resource[M]):
    """What the operator's Python registry offers the tenant."""

    list = operation(tenant.registry_list)
    iter = items(tenant.registry_list)


class Resources(Generic[M]):
    """Every resource of the API, as attributes of a client."""

    api_keys: ApiKeys[M]
    threads: Threads[M]
    messages: Messages[M]
    turns: Turns[M]
    events: Events[M]
    logs: Logs[M]
    files: Files[M]
    kv: Kv[M]
    env: ThreadEnv[M]
    tenant_env: TenantEnv[M]
    actions: Actions[M]
    effects: Effects[M]
    subagents: Subagents[M]
    schedules: Schedules[M]
    webhooks: Webhooks[M]
    models: Models[M]
    prompts: Prompts[M]
    agents: Agents[M]
    code_tools: CodeTools[M]
    bundles: Bundles[M]
    permission_rules: PermissionRules[M]
    credentials: Credentials[M]
    registry: Registry[M]

    def _attach_resources(self) -> None:
        self.api_keys = ApiKeys(self)
        self.threads = Threads(self)
        self.messages = Messages(self)
        self.turns = Turns(self)
        self.events = Events(self)
        self.logs = Logs(self)
        self.files = Files(self)
        self.kv = Kv(self)
        self.env = ThreadEnv(self)
        self.tenant_env = TenantEnv(self)
        self.actions = Actions(self)
        self.effects = Effects(self)
        self.subagents = Subagents(self)
        self.schedules = Schedules(self)
        self.webhooks = Webhooks(self)
        self.models = Models(self)
        self.prompts = Prompts(self)
        self.agents = Agents(self)
        self.code_tools = CodeTools(self)
        self.bundles = Bundles(self)
        self.permission_rules = PermissionRules(self)
        self.credentials = Credentials(self)
        self.registry = Registry(self)
