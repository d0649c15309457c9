from django.conf import settings
from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import TemplateView

from common.api import DocsView, SchemaView, json_bad_request, json_not_found, json_server_error
from config.health import admin_health, console_health, healthz, readyz
from observability.metrics import metrics_view

urlpatterns = [
    path(
        "",
        TemplateView.as_view(
            template_name="home.html", extra_context={"runtime_id": settings.PLATFORM_RUNTIME_ID}
        ),
        name="home",
    ),
    re_path(r"^healthz/?$", healthz, name="healthz"),
    re_path(r"^readyz/?$", readyz, name="readyz"),
    # Prometheus (observability.metrics): 404 unless METRICS_TOKEN is set, then its bearer token.
    re_path(r"^metrics/?$", metrics_view, name="metrics"),
    # The report of /readyz as pages (config.health): before the admin's and console's own.
    path("admin/health/", admin_health, name="admin-health"),
    path("admin/", admin.site.urls),
    path("console/health/", console_health, name="console-health"),
    path("console/", include("console.urls")),
    path("api/schema/", SchemaView.as_view(), name="schema"),
    path("api/docs/", DocsView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("tenancy.urls")),
    path("api/v1/", include("agents.urls")),
    path("api/v1/", include("threads.urls")),
    path("api/v1/", include("usage.urls")),
    path("api/v1/", include("retention.urls")),
    path("api/v1/", include("compaction.urls")),
    path("api/v1/", include("replay.urls")),
    path("api/v1/", include("audit.urls")),
    path("api/v1/", include("connectors.urls")),
    # MCP, AG-UI and A2A (interop): their own paths, under /api/v1/ where they are REST.
    path("", include("interop.urls")),
    # Unknown API URLs answer JSON even with DEBUG on.
    re_path(r"^api/", json_not_found),
]

handler400 = json_bad_request
handler404 = json_not_found
handler500 = json_server_error
