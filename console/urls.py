"""The console's pages, under ``/console/``: logging in and out here, the rest from each
area's module in :mod:`console.views`."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from console.views import (
    a2a_agents,
    agents,
    audit,
    credentials,
    files,
    mcp_servers,
    observe,
    playground,
    threads,
    usage,
    values,
)

app_name = "console"

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="console/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="console:login"), name="logout"),
    *threads.urlpatterns,
    *files.urlpatterns,
    *values.urlpatterns,
    *observe.urlpatterns,
    *mcp_servers.urlpatterns,
    *a2a_agents.urlpatterns,
    *credentials.urlpatterns,  # before the agents pages: agents/<kind>/<name>/ would take it
    *agents.urlpatterns,
    *playground.urlpatterns,
    *usage.urlpatterns,
    *audit.urlpatterns,
]
