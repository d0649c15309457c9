"""The bases of the routes that address one of the tenant's objects: a thread
(``/api/v1/threads/{thread_id}/…``) or a turn (``/api/v1/turns/{turn_id}/…``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.audit import AuditAction
from common.schema import error_response
from tenancy.auditing import audit_by
from tenancy.models import Role
from tenancy.principals import Principal
from tenancy.viewsets import request_principal
from threads.models import Thread, Turn
from threads.services.idempotency import HEADER, MAX_KEY_CHARS, idempotent_call, request_hash
from threads.services.threads import thread_get
from threads.services.turns import turn_get


class TenantObjectView(APIView):
    """Resolves the URL's object within the caller's tenant (another tenant's is a 404)
    after authentication and permissions, before the handler, whatever the body says.

    Roles as everywhere: ``read_role`` for safe methods, ``write_role`` for the rest.
    """

    read_role: ClassVar[Role] = Role.READ_ONLY
    write_role: ClassVar[Role] = Role.MEMBER

    @property
    def principal(self) -> Principal:
        return request_principal(self.request)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.resolve()

    def resolve(self) -> object:
        """Look the URL's object up (cached); NotFound when the tenant has none."""
        raise NotImplementedError


class ThreadScopedView(TenantObjectView):
    """Resolves ``thread_id`` within the caller's tenant."""

    def resolve(self) -> object:
        return self.thread()

    def thread(self) -> Thread:
        """The URL's thread, looked up once per request."""
        cached: Thread | None = getattr(self, "_thread", None)
        if cached is None:
            cached = thread_get(tenant=self.principal.tenant, thread_id=self.kwargs["thread_id"])
            self._thread = cached
        return cached


class TurnScopedView(TenantObjectView):
    """Resolves ``turn_id`` within the caller's tenant."""

    def resolve(self) -> object:
        return self.turn()

    def turn(self) -> Turn:
        """The URL's turn (its thread attached), looked up once per request."""
        cached: Turn | None = getattr(self, "_turn", None)
        if cached is None:
            cached = turn_get(tenant=self.principal.tenant, turn_id=self.kwargs["turn_id"])
            self._turn = cached
        return cached


IDEMPOTENCY_KEY = OpenApiParameter(
    HEADER,
    str,
    OpenApiParameter.HEADER,
    description=f"1-{MAX_KEY_CHARS} printable characters: a repeat with the same key, path "
    "and body within 24 hours answers the first answer and creates nothing",
)

# What a POST that creates work answers when it cannot (409).
WORK_REFUSED = error_response(
    409,
    "The thread is terminated (`terminated`) or busy (`thread_busy`), or the Idempotency-Key "
    "was used for another request (`idempotency_key_reused`)",
)


def idempotent(
    request: Request,
    principal: Principal,
    produce: Callable[[], tuple[int, Mapping[str, Any]]],
) -> Response:
    """Answer a POST that creates work: ``produce()`` (status, body), or with an
    ``Idempotency-Key`` header the first answer given for that key and body (marked
    ``Idempotent-Replayed: true``). The work and the key commit together."""
    key = request.headers.get(HEADER)
    if key is None:
        status, body = produce()
        return Response(body, status=status)
    digest = request_hash(method=request.method or "POST", path=request.path, body=request.data)
    answer = idempotent_call(tenant=principal.tenant, key=key, digest=digest, produce=produce)
    response = Response(answer.body, status=answer.status)
    if answer.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def turn_submitted_audit(principal: Principal, turn: Turn, user: object) -> None:
    """Who submitted ``turn`` (the key or the user calling) and the end user it names; call
    it in the turn's transaction."""
    details = {"thread_id": str(turn.thread_id), "user": user}
    audit_by(principal, AuditAction.TURN_SUBMITTED, "turn", turn.pk, details)
