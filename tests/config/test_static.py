"""Static files (admin, API docs) are served by the ASGI app itself."""

from __future__ import annotations

from django.test import Client


def test_admin_stylesheet_is_served() -> None:
    response = Client().get("/static/admin/css/base.css")

    assert response.status_code == 200
    assert b"body" in b"".join(response.streaming_content)  # type: ignore[attr-defined]


def test_swagger_ui_assets_are_self_hosted() -> None:
    response = Client().get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")

    assert response.status_code == 200
