"""The ecosystem's protocols, each under its own path (included by config.urls at the root)."""

from django.urls import URLPattern, URLResolver

urlpatterns: list[URLPattern | URLResolver] = []
