"""Django's deployment checks for the middleware of :mod:`common.middleware`.

Django's security checks look for its middleware by dotted path; ours subclass it under
other paths, so Django's "is not in your MIDDLEWARE" warnings (W001-W003) are silenced in
settings and every check that depends on that middleware runs again here with
``MIDDLEWARE`` read as the Django paths ours stand for."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, register
from django.core.checks.security import base, csrf, sessions
from django.test.utils import override_settings

from common import middleware

STANDS_FOR = {
    f"common.middleware.{ours.__name__}": f"{django.__module__}.{django.__name__}"
    for ours, django in middleware.EQUIVALENTS.items()
}
_MIDDLEWARE_CHECKS = (
    base.check_security_middleware,
    base.check_xframe_options_middleware,
    base.check_sts,
    base.check_sts_include_subdomains,
    base.check_sts_preload,
    base.check_content_type_nosniff,
    base.check_ssl_redirect,
    base.check_xframe_deny,
    base.check_referrer_policy,
    base.check_cross_origin_opener_policy,
    csrf.check_csrf_middleware,
    csrf.check_csrf_cookie_secure,
    sessions.check_session_cookie_secure,
    sessions.check_session_cookie_httponly,
)


@register(Tags.security, deploy=True)
def middleware_security(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    as_django = [STANDS_FOR.get(path, path) for path in settings.MIDDLEWARE]
    with override_settings(MIDDLEWARE=as_django):
        return [message for check in _MIDDLEWARE_CHECKS for message in check(app_configs)]
