"""The console's Audit page: the tenant's audit trail, newest first, for its admins (the
role ``GET /api/v1/audit`` requires; any other role is a 403, as the API answers). Filters
by action, actor id and target type; "Older" pages by the time of the page's last entry."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.http import require_GET

from audit.api import ACTIONS, AuditViewSet, audit_entry_json
from audit.models import AuditEntry
from common.time import from_us
from console.scope import console_of, console_view
from console.views.common import page

READ_ROLE = AuditViewSet.read_role
PAGE_SIZE = 50
FILTERS = ("action", "actor_id", "target_type")


def _filters(request: HttpRequest) -> dict[str, str]:
    chosen = {
        name: request.GET.get(name, "").strip() for name in ("action", "actor_id", "target_type")
    }
    if chosen["action"] not in ACTIONS:
        chosen["action"] = ""
    return chosen


@console_view()
@require_GET
def audit_page(request: HttpRequest) -> HttpResponse:
    principal = console_of(request).principal
    if not principal.role.allows(READ_ROLE):
        raise PermissionDenied(
            f"role {principal.role.value} may not read the audit trail; "
            f"{READ_ROLE.value} is required"
        )
    chosen = _filters(request)
    rows = AuditEntry.objects.for_tenant(principal.tenant).filter(
        **{name: value for name, value in chosen.items() if value}
    )
    before = request.GET.get("before", "")
    if before.isdigit():
        rows = rows.filter(created_at__lt=int(before))
    entries: list[dict[str, Any]] = [
        audit_entry_json(row) | {"at": from_us(row.created_at)}
        for row in rows.order_by("-created_at", "-id")[: PAGE_SIZE + 1]
    ]
    older = entries[PAGE_SIZE - 1]["created_at"] if len(entries) > PAGE_SIZE else None
    context = {
        "nav": "audit", "entries": entries[:PAGE_SIZE], "older": older, "actions": ACTIONS,
        "chosen": chosen,
    }  # fmt: skip
    return page(request, "console/audit.html", context)


urlpatterns = [path("audit/", audit_page, name="audit")]
