"""Failed console and admin logins: django-axes records them (one ``AccessAttempt`` row per
username, client address and user agent), and this module sets its rules.

* **Per account, from one address.** ``LOGIN_FAILURES_PER_ACCOUNT`` failures of one username
  from one client address lock that (username, address). The lock is keyed by the address:
  failures from an attacker's address never lock the person out of their own, so no tenant
  can lock another tenant's users out by guessing.
* **Per address.** ``LOGIN_FAILURES_PER_ADDRESS`` failures from one address, whatever the
  usernames, lock every login from it (one address trying many accounts).
* **For how long.** A row's failures count until ``LOGIN_LOCKOUT_S`` after its last one.
  While locked, a login is refused before its password is checked, and the refusal is not
  counted: the lockout page (429, ``Retry-After``) says how long is left, and it holds.
* **Reset.** A successful login clears its own (username, address), not the address's
  failures for other usernames. A superuser removes rows in the admin
  (:mod:`tenancy.lockouts_admin`), or runs ``manage.py axes_reset`` (or ``axes_reset_ip``,
  ``axes_reset_username``, ``axes_reset_ip_username``).

The client address is ``REMOTE_ADDR`` as the ASGI server set it, counted as
:func:`tenancy.throttling.client_address` does (an IPv6 address as its /64 network).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from tenancy.throttling import client_address


def login_client_address(request: HttpRequest) -> str | None:
    """The address a login's failures are counted under (``AXES_CLIENT_IP_CALLABLE``)."""
    return client_address(request.META.get("REMOTE_ADDR"))


def _recent(request: HttpRequest) -> QuerySet[AccessAttempt]:
    """The attempts from the request's address whose failures still count."""
    moment = getattr(request, "axes_attempt_time", None) or timezone.now()
    threshold = moment - settings.AXES_COOLOFF_TIME
    attempts: QuerySet[AccessAttempt] = AccessAttempt.objects.filter(
        ip_address=request.axes_ip_address,  # type: ignore[attr-defined]
        attempt_time__gte=threshold,
    )
    return attempts


def _failures(attempts: QuerySet[AccessAttempt]) -> int:
    return int(attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0)


class LoginThrottleHandler(AxesDatabaseHandler):
    """Axes' database handler with a second, higher limit per address (``AXES_HANDLER``).

    Axes compares :meth:`get_failures` with one limit, ``AXES_FAILURE_LIMIT`` (the
    per-account one) over ``AXES_LOCKOUT_PARAMETERS`` (username and address together); an
    address over ``LOGIN_FAILURES_PER_ADDRESS`` answers that limit itself, so it is locked
    for every username.
    """

    def get_failures(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        failures = int(super().get_failures(request, credentials))
        if _failures(_recent(request)) >= settings.LOGIN_FAILURES_PER_ADDRESS:
            return max(failures, int(settings.AXES_FAILURE_LIMIT))
        return failures


def _locked_until(request: HttpRequest, username: str | None) -> tuple[dt.datetime, bool]:
    """When the request's login is free again, and whether its address (rather than its
    username from that address) is what is locked. Each row stops counting
    ``AXES_COOLOFF_TIME`` after its last failure, so the latest row of what is locked bounds
    the wait."""
    recent = _recent(request)
    by_address = _failures(recent) >= settings.LOGIN_FAILURES_PER_ADDRESS
    rows = recent if by_address else recent.filter(username=username)
    latest = rows.aggregate(latest=Max("attempt_time"))["latest"] or timezone.now()
    return latest + settings.AXES_COOLOFF_TIME, by_address


def _wait_text(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """The page a locked login gets (``AXES_LOCKOUT_CALLABLE``): 429, what is locked and how
    long to wait, and ``Retry-After``. Axes calls it with the request and, depending on the
    path, other arguments; what it needs comes from the request."""
    username = get_client_username(request, getattr(request, "axes_credentials", None))
    until, by_address = _locked_until(request, username)
    retry_after_s = max(1, math.ceil((until - timezone.now()).total_seconds()))
    context = {
        "by_address": by_address,
        "wait": _wait_text(retry_after_s),
        "login_url": request.path,
    }
    response = render(request, "console/login_throttled.html", context, status=429)
    response["Retry-After"] = str(retry_after_s)
    return response
