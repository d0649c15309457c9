"""The A2A routes: an agent's card and its JSON-RPC endpoint, per tenant and agent.

``GET /a2a/{tenant_slug}/{agent}/.well-known/agent-card.json`` and ``POST
/a2a/{tenant_slug}/{agent}/`` (JSON-RPC 2.0, A2A 1.0 method names). Both take one of the
tenant's API keys (``Authorization: Bearer``); a slug that is not the key's tenant, or an
agent it does not have, is a 404 (another tenant's agents are not told apart from none).

Errors. A method's A2A errors (invalid params, task not found, not cancelable, unsupported)
answer HTTP 200 with the JSON-RPC error the SDK maps (its codes and ``google.rpc.ErrorInfo``
details). What the platform refuses before or around a method answers its own HTTP status
(401 without a valid key, 403 for a read-only key that writes, 404, 402 a budget, 409 a
terminated thread or a reused ``messageId``, 429 a rate limit or quota, 503 an outage) with
a JSON-RPC error body: code -32700 for unreadable JSON, -32602 for a 400, else -32000, and an
``ErrorInfo`` whose ``metadata.code`` is the platform's error code.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

from a2a.server.request_handlers.response_helpers import (
    build_error_response,
    prepare_response_object,
)
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    ExtendedAgentCardNotConfiguredError,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    MethodNotFoundError,
    SendMessageRequest,
    SendMessageResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskPushNotificationConfig,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, VERSION_HEADER
from a2a.utils.errors import A2AError
from a2a.utils.proto_utils import parse_lenient, validate_proto_required_fields
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Max
from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.documents import AgentDoc
from agents.selectors import agent_load
from common.connections import connection_release
from common.drf import StreamRenderer
from common.errors import NotFound
from interop.a2a.cards import agent_card, agent_card_json
from interop.a2a.push import (
    SEND_FIELD,
    push_config_check,
    push_config_delete,
    push_config_get,
    push_config_save,
    push_configs,
)
from interop.a2a.stream import (
    Follower,
    sse_frame,
    task_events,
    task_outcome,
)
from interop.a2a.submit import message_submit
from interop.a2a.tasks import FINAL_STATES, task_read
from tenancy.authentication import ApiKeyAuthentication
from tenancy.models import Role
from tenancy.principals import Principal
from tenancy.viewsets import request_principal
from threads.models import TURN_TERMINAL, Event, Turn
from threads.services.control import turn_cancel
from threads.services.turns import turn_events_start, turn_get
from threads.streams import CredentialsGone

# How long a blocking SendMessage waits for its task to end (or rest on a person's
# decision) before it answers the task as it stands.
BLOCKING_WAIT_S = 600.0
JSON_TYPE = "application/json"
EVENT_STREAM = "text/event-stream"
SERVER_ERROR = -32000
ERROR_DOMAIN = "standard-agents"
_RPC_CODES = {"malformed_body": -32700, "invalid": -32602, "bad_request": -32602}


class _AgentView(APIView):
    """Resolves the URL's tenant and agent for the key's tenant: another tenant's slug, or
    an agent the tenant has not, is a 404."""

    authentication_classes = [ApiKeyAuthentication]
    read_role: ClassVar[Role] = Role.READ_ONLY
    # Every call is a POST; each method checks the role it needs (reads: any key).
    write_role: ClassVar[Role] = Role.READ_ONLY

    agent: AgentDoc

    @property
    def principal(self) -> Principal:
        return request_principal(self.request)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        tenant = self.principal.tenant
        if tenant.slug != kwargs["tenant_slug"]:
            raise NotFound(f"no agent {kwargs['name']}")
        self.agent = agent_load(tenant=tenant, name=kwargs["name"])

    def endpoint(self) -> str:
        return self.request.build_absolute_uri(
            reverse("a2a-endpoint", kwargs={"tenant_slug": self.kwargs["tenant_slug"],
                                            "name": self.agent.name})
        )  # fmt: skip


class AgentCardView(_AgentView):
    @extend_schema(exclude=True)
    def get(self, request: Request, tenant_slug: str, name: str) -> Response:
        """The agent's A2A card (see :mod:`interop.a2a.cards`)."""
        card = agent_card(tenant=self.principal.tenant, agent=self.agent, endpoint=self.endpoint())
        return Response(agent_card_json(card))


def _json(body: Mapping[str, Any], status: int = 200) -> HttpResponse:
    return HttpResponse(json.dumps(body, cls=DjangoJSONEncoder), status=status,
                        content_type=JSON_TYPE)  # fmt: skip


_RESULTS = (Task, SendMessageResponse, TaskPushNotificationConfig,
            ListTaskPushNotificationConfigsResponse)  # fmt: skip


def _result(
    request_id: Any,
    result: Task | SendMessageResponse | TaskPushNotificationConfig
    | ListTaskPushNotificationConfigsResponse,
) -> dict[str, Any]:  # fmt: skip
    """A JSON-RPC success response carrying ``result``."""
    return prepare_response_object(request_id, result, _RESULTS)


class _EventStreamRenderer(StreamRenderer):
    """Lets a streaming call's ``Accept: text/event-stream`` through content negotiation."""

    media_type = EVENT_STREAM
    format = "sse"


class AgentEndpointView(_AgentView):
    """JSON-RPC 2.0: ``SendMessage``, ``SendStreamingMessage``, ``GetTask``, ``CancelTask``,
    ``SubscribeToTask``, and a task's push notification configs (``Create``, ``Get``,
    ``List``, ``Delete``: :mod:`interop.a2a.push`); ``ListTasks`` and the extended card are
    refused with their A2A errors."""

    renderer_classes = [JSONRenderer, _EventStreamRenderer]
    request_id: str | int | None = None

    @extend_schema(exclude=True)
    def post(self, request: Request, tenant_slug: str, name: str) -> HttpResponseBase:
        body = request.data
        if not isinstance(body, Mapping) or body.get("jsonrpc") != "2.0":
            return self._error(InvalidRequestError("a JSON-RPC 2.0 request object is required"))
        request_id = body.get("id")
        if isinstance(request_id, str | int) and not isinstance(request_id, bool):
            self.request_id = request_id
        try:
            return self._call(str(body.get("method") or ""), body.get("params") or {})
        except A2AError as error:
            return self._error(error)

    def _call(self, method: str, params: Any) -> HttpResponseBase:
        model = JsonRpcDispatcher.METHOD_TO_MODEL.get(method)
        if model is None:
            raise MethodNotFoundError(f"no method {method!r}")
        self._check_version()
        if not isinstance(params, Mapping):
            raise InvalidParamsError("params must be an object")
        try:
            parsed = parse_lenient(dict(params), model())
        except Exception as error:  # protobuf's ParseError, and what it lets through
            raise InvalidParamsError(f"params: {error}") from error
        validate_proto_required_fields(parsed)
        if isinstance(parsed, SendMessageRequest):
            streaming = method == "SendStreamingMessage"
            return self._send(parsed, streaming=streaming)
        if isinstance(parsed, GetTaskRequest):
            length = parsed.history_length if parsed.HasField("history_length") else None
            return _json(_result(self.request_id, task_read(turn=self._turn(parsed.id),
                                                            history_length=length)))  # fmt: skip
        if isinstance(parsed, CancelTaskRequest):
            return self._cancel(parsed)
        if isinstance(parsed, SubscribeToTaskRequest):
            return self._subscribe(parsed)
        if method == "GetExtendedAgentCard":
            raise ExtendedAgentCardNotConfiguredError
        if method == "ListTasks":
            raise UnsupportedOperationError("ListTasks is not offered; GetTask reads a task")
        return self._push(parsed)

    def _push(self, parsed: Any) -> HttpResponse:
        """The push notification config methods (:mod:`interop.a2a.push`)."""
        if isinstance(parsed, TaskPushNotificationConfig):
            self._writer()
            saved = push_config_save(turn=self._turn(parsed.task_id), config=parsed)
            return _json(_result(self.request_id, saved))
        if isinstance(parsed, GetTaskPushNotificationConfigRequest):
            found = push_config_get(turn=self._turn(parsed.task_id), config_id=parsed.id)
            return _json(_result(self.request_id, found))
        if isinstance(parsed, ListTaskPushNotificationConfigsRequest):
            configs = push_configs(turn=self._turn(parsed.task_id))
            listed = ListTaskPushNotificationConfigsResponse(configs=configs)
            return _json(_result(self.request_id, listed))
        assert isinstance(parsed, DeleteTaskPushNotificationConfigRequest)
        self._writer()
        push_config_delete(turn=self._turn(parsed.task_id), config_id=parsed.id)
        return _json({"jsonrpc": "2.0", "id": self.request_id, "result": None})

    def _check_version(self) -> None:
        """``A2A-Version`` (absent: 0.3, as the protocol says) must be a 1.x."""
        version = self.request.headers.get(VERSION_HEADER) or PROTOCOL_VERSION_0_3
        if version.split(".")[0] != "1":
            raise VersionNotSupportedError(
                f"A2A version {version!r} is not supported; send {VERSION_HEADER}: 1.0"
            )

    def _writer(self) -> None:
        if not self.principal.role.allows(Role.MEMBER):
            raise exceptions.PermissionDenied(
                f"role {self.principal.role.value} may not send or cancel; member or above "
                "is required"
            )

    def _turn(self, task_id: str) -> Turn:
        """The agent's turn ``task_id``; another agent's or tenant's is TaskNotFoundError."""
        try:
            turn = turn_get(tenant=self.principal.tenant, turn_id=task_id)
        except NotFound as error:
            raise TaskNotFoundError(f"no task {task_id}") from error
        if turn.thread.agent_name != self.agent.name:
            raise TaskNotFoundError(f"no task {task_id}")
        return turn

    def _send(self, params: SendMessageRequest, *, streaming: bool) -> HttpResponseBase:
        self._writer()
        config = params.configuration
        push = None
        if config.HasField("task_push_notification_config"):
            push = push_config_check(config.task_push_notification_config, prefix=SEND_FIELD)
        turn = message_submit(
            principal=self.principal, agent=self.agent.name, message=params.message,
            path=self.request.path, with_turn=push,
        )  # fmt: skip
        after = turn_events_start(turn)
        follower = Follower.of(turn, self.principal)
        if streaming:
            return self._sse(task_events(follower, first=task_read(turn=turn), after=after))
        length = config.history_length if config.HasField("history_length") else None
        if config.return_immediately:
            task = task_read(turn=turn, history_length=length)
            return _json(_result(self.request_id, SendMessageResponse(task=task)))
        connection_release()  # the wait holds no connection; each read takes one
        return StreamingHttpResponse(self._outcome(follower, after, length), content_type=JSON_TYPE)

    async def _outcome(
        self, follower: Follower, after: int, history_length: int | None
    ) -> AsyncIterator[bytes]:
        try:
            task = await task_outcome(
                follower, after=after, timeout=BLOCKING_WAIT_S, history_length=history_length
            )
        except CredentialsGone:
            yield _credentials_gone(self.request_id)
            return
        yield json.dumps(_result(self.request_id, SendMessageResponse(task=task))).encode()

    def _cancel(self, params: CancelTaskRequest) -> HttpResponse:
        self._writer()
        turn = self._turn(params.id)
        if turn.status in TURN_TERMINAL:
            raise TaskNotCancelableError(f"task {params.id} is {turn.status}")
        cancelled = turn_cancel(thread=turn.thread, turn=turn)
        return _json(_result(self.request_id, task_read(turn=cancelled)))

    def _subscribe(self, params: SubscribeToTaskRequest) -> HttpResponseBase:
        turn = self._turn(params.id)
        # The newest event first, then the task: what happens after the read is sent.
        newest = Event.objects.filter(thread_id=turn.thread_id).aggregate(n=Max("sequence"))["n"]
        task = task_read(turn=turn)
        if task.status.state in FINAL_STATES:
            raise UnsupportedOperationError(f"task {params.id} is over; GetTask reads it")
        follower = Follower.of(turn, self.principal)
        return self._sse(task_events(follower, first=task, after=int(newest or 0)))

    def _sse(self, events: AsyncIterator[Any]) -> StreamingHttpResponse:
        connection_release()
        response = StreamingHttpResponse(self._frames(events), content_type=EVENT_STREAM)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response

    async def _frames(self, events: AsyncIterator[Any]) -> AsyncIterator[bytes]:
        try:
            async for response in events:
                yield sse_frame(self.request_id, response)
        except CredentialsGone:
            yield b"event: error\ndata: " + _credentials_gone(self.request_id) + b"\n\n"

    def _error(self, error: A2AError) -> HttpResponse:
        """A method's A2A error: HTTP 200, the JSON-RPC error the SDK builds for it."""
        return _json(build_error_response(self.request_id, error))

    def handle_exception(self, exc: Exception) -> Response:
        """What the platform refuses (authentication, roles, 404, throttles, quotas,
        budgets, conflicts, outages): its HTTP status and headers, a JSON-RPC error body."""
        response = super().handle_exception(exc)
        if not isinstance(response.data, Mapping):
            return response
        error = response.data.get("error") or {}
        code = str(error.get("code") or "error")
        metadata = {key: str(value) for key, value in error.items()
                    if key in ("code", "field") and value is not None}  # fmt: skip
        body = {
            "jsonrpc": "2.0",
            "id": self.request_id,
            "error": {
                "code": _RPC_CODES.get(code, SERVER_ERROR),
                "message": str(error.get("message") or "the request was refused"),
                "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                          "reason": code.upper(), "domain": ERROR_DOMAIN,
                          "metadata": metadata}],
            },
        }  # fmt: skip
        headers = {name: response[name] for name in ("WWW-Authenticate", "Retry-After")
                   if name in response}  # fmt: skip
        return Response(body, status=response.status_code, headers=headers)


def _credentials_gone(request_id: Any) -> bytes:
    error = InternalError("the credentials of this call were revoked or expired")
    return json.dumps(build_error_response(request_id, error)).encode()
