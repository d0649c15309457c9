"""Thread endpoints from the registry, at ``/api/v1/threads/{id}/endpoints/{route}``.

The thread is looked up in the caller's tenant (404 otherwise); the route is matched
against the registry as that tenant sees it (404 when nothing matches, 405 when the
path matches but not the method). A ``public`` endpoint also answers callers without
credentials, who appear as anonymous (no principal). The handler receives the request,
an at-rest ThreadState (``execution`` is None) and the route parameters, and may
return an HttpResponse, or data that becomes JSON.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.urls import re_path
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import SAFE_METHODS, AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.registry import EndpointMethodNotAllowed, current_registry
from common.errors import AuthenticationFailed, NotFound, PermissionDenied
from common.tenant_wall import tenant_enter, tenant_of
from tenancy.models import Role
from tenancy.principals import Principal
from threads.models import Thread
from threads.services.threads import thread_get
from threads.state import ThreadState


class ThreadEndpointView(APIView):
    permission_classes = [AllowAny]  # access is decided per endpoint below

    def _dispatch_endpoint(self, request: Request, thread_id: str, route: str) -> Any:
        principal = request.auth if isinstance(request.auth, Principal) else None
        if principal is not None:
            thread = thread_get(tenant=principal.tenant, thread_id=thread_id)
        else:
            thread = self._public_thread(request.method or "GET", thread_id, route)
        view = current_registry().visible_to(thread.tenant.slug)
        try:
            match = view.match_endpoint(request.method or "GET", route)
        except EndpointMethodNotAllowed as error:
            # DRF copies self.headers onto the response last, so Allow goes there.
            self.headers["Allow"] = ", ".join(sorted(error.allowed))
            return Response({"error": error.as_dict()}, status=405)
        if match is None:
            raise NotFound(f"no thread endpoint {route!r}")
        if principal is None and not match.entry.public:
            raise AuthenticationFailed("this endpoint needs an API key or a session")
        writes = request.method not in SAFE_METHODS
        if principal is not None and writes and not principal.role.allows(Role.MEMBER):
            raise PermissionDenied(f"role {principal.role.value} may not write here")
        result = match.entry.function(request, ThreadState(thread), dict(match.params))
        if isinstance(result, HttpResponse):
            return result
        return Response(result)

    def _public_thread(self, method: str, thread_id: str, route: str) -> Thread:
        """Anonymous callers reach only public endpoints; say so before looking anything up."""
        public = [e for e in current_registry().endpoints if e.public]
        if not public:
            raise AuthenticationFailed("Authentication credentials were not provided.")
        tenant_id = tenant_of(Thread, thread_id)  # an anonymous call acts for the thread's tenant
        if tenant_id is not None:
            tenant_enter(tenant_id)
            thread = Thread.objects.select_related("tenant").filter(id=thread_id).first()
            if thread is not None:
                return thread
        raise NotFound(f"no thread {thread_id}")

    @extend_schema(exclude=True)
    def get(self, request: Request, thread_id: str, route: str = "") -> Any:
        return self._dispatch_endpoint(request, thread_id, route)

    post = put = patch = delete = get


urlpatterns = [
    re_path(r"^endpoints/?(?P<route>.*)$", ThreadEndpointView.as_view(), name="thread-endpoint"),
]
