"""The base of every route under ``/api/v1/threads/{thread_id}/``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tenancy.models import Role
from tenancy.principals import Principal
from tenancy.viewsets import request_principal
from threads.models import Thread
from threads.services.idempotency import HEADER, idempotent_call, request_hash
from threads.services.threads import thread_get


class ThreadScopedView(APIView):
    """Resolves ``thread_id`` within the caller's tenant (another tenant's thread is 404).

    Roles as everywhere: ``read_role`` for safe methods, ``write_role`` for the rest.
    """

    read_role: ClassVar[Role] = Role.READ_ONLY
    write_role: ClassVar[Role] = Role.MEMBER

    @property
    def principal(self) -> Principal:
        return request_principal(self.request)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """After authentication and permissions, before the handler: another tenant's
        thread is a 404 whatever the request body says."""
        super().initial(request, *args, **kwargs)
        self.thread()

    def thread(self) -> Thread:
        """The URL's thread, looked up once per request."""
        cached: Thread | None = getattr(self, "_thread", None)
        if cached is None:
            cached = thread_get(tenant=self.principal.tenant, thread_id=self.kwargs["thread_id"])
            self._thread = cached
        return cached


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
