"""The API's answers, as typed dictionaries.

Each answer is the JSON the API sent, unchanged: a ``TypedDict`` names its fields for the
type checker and costs nothing at run time, and a field a newer server adds is simply
there. Fields marked ``NotRequired`` may be absent; ``X | None`` ones may be null.

Timestamps are integers, microseconds since the Unix epoch (UTC), in fields named
``..._at``; :func:`standard_agents_client.datetime_from_us` turns one into a
``datetime``. Free-form JSON (metadata, tool arguments, payloads) is ``dict[str, Any]``.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Json = dict[str, Any]

Role = Literal["read_only", "member", "admin"]
MessageRole = Literal["user", "assistant", "system", "tool"]
Strategy = Literal["enqueue", "reject", "interrupt", "rollback"]
Decision = Literal["approve", "deny", "edit", "answer"]
EnvType = Literal["text", "secret"]
RegistryKind = Literal["tools", "hooks", "effects", "endpoints"]
CredentialProvider = Literal["openai", "anthropic", "openai_compatible"]


# Access ---------------------------------------------------------------------------------------


class Tenant(TypedDict):
    id: str
    slug: str
    name: str


class Me(TypedDict):
    """The caller: its tenant, its role and how it authenticated."""

    tenant: Tenant
    role: Role
    kind: Literal["api_key", "user"]
    api_key_id: str | None
    user: str | None


class WsTicket(TypedDict):
    """A one-time WebSocket ticket: open a socket with ``?ticket=`` within ``expires_in``
    seconds."""

    ticket: str
    expires_in: int


class ApiKey(TypedDict):
    """An API key (never its secret)."""

    id: str
    name: str
    prefix: str
    role: Role
    created_at: int
    expires_at: int | None
    revoked: bool
    revoked_at: int | None
    last_used_at: int | None


class ApiKeyCreated(ApiKey):
    """A new API key: ``key`` is the full secret, shown this once."""

    key: str


# Threads --------------------------------------------------------------------------------------


class ThreadCounts(TypedDict):
    messages: int
    logs: int
    files: int
    children: int


class Thread(TypedDict):
    """A thread: an instance of an agent. ``status`` is the read model's (see
    :class:`ThreadRead`)."""

    id: str
    agent: str
    origin_agent: str
    title: str | None
    title_set: bool
    started: bool
    user_id: str | None
    parent_id: str | None
    session_id: str
    relationship: str | None
    arguments: Any
    tags: list[str]
    metadata: Json
    status: str
    created_at: int
    updated_at: int
    last_activity_at: int | None
    terminated_at: int | None
    counts: NotRequired[ThreadCounts]


class LastOutcome(TypedDict):
    """How the thread's last turn ended."""

    turn_id: str
    status: str
    outcome: str | None
    error: str | None
    ended_at: int


class Incident(TypedDict):
    """Something the platform did to keep a thread going (``takeover``: a worker took
    over a turn whose worker died; ``outage``: a turn an outage cut short was resumed)."""

    at: int
    incident: str
    turn_id: NotRequired[str]
    fence: NotRequired[int]
    detail: NotRequired[str]


class ThreadRead(Thread):
    """A thread with its read model: the refined ``status``, the active and queued turns,
    the last outcome, what waits for a person and recent incidents."""

    stored_status: str
    stop_requested: bool
    active_turn: Turn | None
    queued_turns: list[Turn]
    last_outcome: LastOutcome | None
    pending_requests: list[Action | VariableRequest]
    incidents: list[Incident]


class ThreadDeleted(TypedDict):
    """How many threads a delete removed (the thread and its children)."""

    deleted_threads: int


class ThreadStopped(TypedDict):
    stopped: bool
    stopped_turn_id: str | None
    parked_turns: int
    message: str | None


class ThreadTerminated(TypedDict):
    status: Literal["terminated"]
    terminated_at: int | None
    changed: bool


# Messages and turns ---------------------------------------------------------------------------


class ToolCall(TypedDict):
    """A tool call of a message: ``arguments`` is the object the tool was called with."""

    id: str
    name: str
    arguments: Json


class Message(TypedDict):
    """A message of a thread; ``tool_calls`` lists an answer's tool calls (null when it made
    none)."""

    id: str
    seq: int
    role: MessageRole
    content: str | None
    name: str | None
    tool_calls: list[ToolCall] | None
    tool_call_id: str | None
    tool_status: str | None
    created_at: int
    parent_id: str | None
    depth: int
    silent: bool
    status: str
    side: str | None
    metadata: Json
    attachments: list[Json]


class QueuedMessage(TypedDict):
    """A message a turn will store, as it will look (``status`` ``queued``)."""

    id: str
    role: MessageRole
    content: str | None
    attachments: list[Json]
    silent: bool
    metadata: Json
    status: str
    created_at: int


class TurnUsage(TypedDict):
    """What a turn's model calls used; a figure a provider did not report is null."""

    model_calls: int
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cost_usd: float | str | None


class Turn(TypedDict):
    """One submitted input cycle of a thread (see the API's turns)."""

    id: str
    thread_id: str
    kind: Literal["message", "tool", "continue"]
    source: str
    strategy: Strategy
    status: str
    input: Json
    metadata: Json
    created_at: int
    started_at: int | None
    ended_at: int | None
    outcome: str | None
    error: str | None
    usage: TurnUsage | None
    joined_turn_id: str | None
    user: str | None
    message_ids: NotRequired[list[str]]
    routing_limit_summary: NotRequired[Json]


class SubmittedTurn(Turn):
    """The answer of a submit: the turn, and for a message turn the message it will store."""

    message_id: NotRequired[str]
    message: NotRequired[QueuedMessage]


class ThreadCreated(Thread):
    """A new thread; created with an ``input``, the first turn it queued."""

    turn: NotRequired[SubmittedTurn]


class Queued(TypedDict):
    """The answer of ``messages.send`` and ``threads.continue_``: the queued turn."""

    status: Literal["queued"]
    queue_id: str
    turn_id: str
    turn: Turn
    kind: str
    message_id: NotRequired[str]
    message: NotRequired[QueuedMessage]


class TurnWait(TypedDict):
    """A wait's answer: the turn, the messages it wrote and whether it is terminal
    (``done`` is false when the timeout passed first, or when the turn rests on a person's
    decision: then ``actions`` lists what they are asked)."""

    turn: Turn
    messages: list[Message]
    done: bool
    actions: NotRequired[list[Action]]


class ThreadWait(TurnWait):
    """The answer of ``threads.create_and_wait``: a wait's answer for the new thread's first
    turn, and the thread as it was created."""

    thread: Thread


# Events ---------------------------------------------------------------------------------------


class Event(TypedDict):
    """One event of a thread's log (the envelope; ``payload`` depends on ``type``).
    ``sequence`` is null for events that are not stored (``model.delta``,
    ``reasoning.delta``)."""

    type: str
    event_id: str
    sequence: int | None
    timestamp: int
    schema_version: int
    runtime_id: str
    tenant_id: str
    session_id: str | None
    thread_id: str
    flow_id: str | None
    turn_id: str | None
    step_id: str | None
    tool_call_id: str | None
    subagent_id: str | None
    action_id: str | None
    trace_id: str | None
    span_id: str | None
    payload: Json
    refs: Json | None


class Log(TypedDict):
    """A model or tool call record of a thread."""

    id: str
    kind: str
    message_id: str | None
    parent_id: str | None
    data: Json
    created_at: int


# Files, values, env ---------------------------------------------------------------------------


class FileEntry(TypedDict):
    """A file or directory of a thread's file system (a directory's ``mime_type`` is
    blank, its ``size`` 0)."""

    path: str
    name: str
    mime_type: str
    storage: str
    size: int
    is_directory: bool
    metadata: Json
    width: int | None
    height: int | None
    created_at: int
    updated_at: int


class FileStats(TypedDict):
    file_count: int
    directory_count: int
    total_size: int


class GrepMatch(TypedDict):
    line: int
    content: str


class GrepHit(TypedDict):
    """A file whose text holds what ``files.grep`` looked for, and the lines."""

    path: str
    matches: list[GrepMatch]


class FoundPath(TypedDict):
    """A path ``files.find`` found."""

    path: str


class KvValue(TypedDict):
    """A value of a thread's KV store (any JSON)."""

    key: str
    value: Any
    size: int
    updated_at: int


class EnvEntry(TypedDict):
    """An env variable: its name and type, never its value."""

    name: str
    type: EnvType
    updated_at: int


# People's decisions, effects, schedules, webhooks ---------------------------------------------


class Action(TypedDict):
    """A decision a person owes a turn: an approval of a tool call, or input a tool asked
    for."""

    id: str
    thread_id: str
    turn_id: str
    kind: Literal["approval", "input"]
    status: str
    tool_call_id: str | None
    name: str | None
    arguments: Any
    decisions: list[Decision]
    rule: Json | None
    prompt: str | None
    schema: Json | None
    on_expiry: str | None
    response: Json | None
    responder: str | None
    created_at: int
    expires_at: int | None
    resolved_at: int | None
    endpoint: str


class Effect(TypedDict):
    """A scheduled effect of a thread."""

    id: str
    thread_id: str
    name: str
    args: Any
    status: str
    scheduled_at: int
    created_at: int
    attempts: int
    error: str | None
    completed_at: int | None
    manual_run: bool
    replayed_from: str | None


class EffectRun(TypedDict):
    """The answer of ``effects.run``: ``ran`` (a pending effect is due now) or
    ``replayed`` (a finished one ran again as ``replayed_id``)."""

    action: Literal["ran", "replayed"]
    id: str
    effect: Effect
    replayed_id: NotRequired[str]


class Schedule(TypedDict):
    """A recurring schedule: a turn or an effect on a cron expression."""

    id: str
    name: str
    thread_id: str | None
    agent: str | None
    cron: str
    timezone: str
    action: Literal["turn", "effect"]
    input: Json | None
    effect: Json | None
    paused: bool
    next_run_at: int | None
    last_run_at: int | None
    last_run: Json | None
    runs: int
    created_at: int
    updated_at: int


class Webhook(TypedDict):
    """A webhook endpoint; ``secret`` only in the answer that creates it."""

    id: str
    url: str
    event_types: list[str]
    description: str
    enabled: bool
    consecutive_failures: int
    disabled_at: int | None
    disabled_reason: str | None
    created_at: int
    updated_at: int
    secret: NotRequired[str | None]


class WebhookSecret(TypedDict):
    secret: str


class WebhookDelivery(TypedDict):
    """One event sent (or to be sent) to a webhook endpoint, with its attempts' log."""

    id: str
    endpoint_id: str
    thread_id: str | None
    event_type: str
    status: Literal["pending", "sending", "delivered", "failed"]
    attempts: int
    next_attempt_at: int | None
    last_status_code: int | None
    last_error: str | None
    log: list[Json]
    created_at: int
    delivered_at: int | None
    payload: Json


# Definitions ----------------------------------------------------------------------------------


class Problem(TypedDict):
    """A problem a write found in the tenant's definitions."""

    kind: str
    name: str
    path: str
    message: str
    severity: Literal["error", "warning"]


class _Definition(TypedDict):
    id: str
    name: str
    created_at: int
    updated_at: int
    warnings: NotRequired[list[Problem] | None]


class ModelDefinition(_Definition):
    """A model (``api_key`` is write-only: ``has_api_key`` says whether one is stored)."""

    provider: Literal["openai", "anthropic", "scripted"]
    model_id: str
    base_url: str | None
    api_key_env: str | None
    credential: str | None
    config: Json
    fallbacks: list[str]
    input_price: float | str | None
    output_price: float | str | None
    cached_price: float | str | None
    capabilities: Json
    has_api_key: bool


class PromptDefinition(_Definition):
    tool_description: str
    prompt: list[Json]
    model: str
    include_chat: bool
    include_past_tools: bool
    parallel_tool_calls: bool
    tool_choice: Literal["auto", "none", "required"]
    required_schema: Json | None
    variables: list[Json]
    tools: list[Any]
    env: dict[str, str]
    reasoning: Json | None
    hooks: list[str]
    code_mode: bool


class AgentDefinition(_Definition):
    type: Literal["ai_human", "dual_ai"]
    side_a: Json
    side_b: Json | None
    max_session_turns: int | None
    expose_as_tool: bool
    tool_description: str
    description: str
    env: dict[str, str]
    hooks: list[str]


class CodeToolDefinition(_Definition):
    description: str
    args_schema: Json | None
    language: Literal["typescript", "javascript"]
    source: str


class Bundle(TypedDict):
    """A bundle: the tenant's definitions in one document."""

    version: int
    models: NotRequired[list[Json]]
    prompts: NotRequired[list[Json]]
    agents: NotRequired[list[Json]]
    code_tools: NotRequired[list[Json]]


class BundleReport(TypedDict):
    """What an import did (or, with ``dry_run``, would do); ``errors`` name the path of
    each problem in the document."""

    dry_run: bool
    created: list[str]
    updated: list[str]
    unchanged: list[str]
    deleted: list[str]
    warnings: list[dict[str, str]]
    errors: list[dict[str, str]]


class PermissionRule(TypedDict):
    """A tenant rule for tool calls: ``decision`` for calls of ``tool`` by ``agent``
    (empty: every one), limited by the condition ``when``."""

    id: str
    agent: str
    tool: str
    decision: Literal["allow", "ask", "deny"]
    when: Any
    expires_in: int | None
    on_expiry: Literal["deny", "allow"] | None
    description: str
    created_at: int
    updated_at: int


class Credential(TypedDict):
    """A provider credential; its key is write-only, so no answer holds it. ``base_url``
    is where an ``openai_compatible`` key goes (None: the provider's official endpoint).
    ``platform`` marks the operator's credentials granted to the tenant
    (``platform:openai``): they have no id and no times, and ``base_url`` is the first
    endpoint the operator allows."""

    id: str | None
    name: str
    provider: CredentialProvider
    base_url: str | None
    description: str
    platform: bool
    created_at: int | None
    updated_at: int | None
    rotated_at: int | None


# Code and subagents ---------------------------------------------------------------------------


class CodeError(TypedDict):
    name: str
    message: str
    stack: str | None
    line: int | None
    column: int | None
    filename: str | None
    specifier: str | None


class CodeLog(TypedDict):
    level: str
    args: Any
    timestamp: int | float


class CodeResult(TypedDict):
    """The result of ``threads.run_code``: ``status`` (``success``, ``error``,
    ``timeout``, ``terminated``, ``link_error``, ...), the value, the error, console logs,
    reports and the duration (``durationMs``, as the spec names it)."""

    status: str
    result: Any
    error: CodeError | None
    logs: list[CodeLog]
    reports: Any
    durationMs: int | float


class Child(TypedDict):
    """A subagent of a thread: its registry entry and the child thread's status."""

    reference: str
    relationship: str
    owner: str
    name: str
    title: str | None
    thread_name: str | None
    description: str | None
    blocking: bool
    resumable: bool
    receives_messages: str | None
    parent_communication: str | None
    status: str
    initial_arguments: Any
    spawn_group_id: str | None
    created_at: int
    updated_at: int
    terminated_at: int | None
    thread_status: str | None


class VariableRequest(TypedDict):
    """A variable-bootstrap request: what a deferred subagent requires, what is missing."""

    request_id: str
    kind: Literal["variables"]
    parent_thread_id: str
    agent_name: str
    registry_agent_name: str
    required: list[str]
    missing: list[str]
    status: str
    child_thread_id: str | None
    endpoint: str
    created_at: int
    expires_at: int


class VariablesProvided(TypedDict):
    request_id: str
    child_thread_id: str
    status: str
