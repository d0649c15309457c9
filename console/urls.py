"""The console's pages, under ``/console/``."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from console import views

app_name = "console"

THREAD = "threads/<uuid:thread_id>/"

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="console/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="console:login"), name="logout"),
    path("tenant/", views.tenant_choose, name="tenant-choose"),
    path("", views.threads_page, name="threads"),
    path("threads/new/", views.thread_new, name="thread-new"),
    path(THREAD, views.thread_detail, name="thread"),
    path(THREAD + "messages/", views.message_send, name="message-send"),
    path(THREAD + "stop/", views.thread_stop_view, name="thread-stop"),
    path(THREAD + "turns/<uuid:turn_id>/cancel/", views.turn_cancel_view, name="turn-cancel"),
    path(THREAD + "actions/<uuid:action_id>/", views.action_respond_view, name="action-respond"),
    path(THREAD + "ws-ticket/", views.ws_ticket, name="ws-ticket"),
]
