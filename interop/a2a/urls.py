"""The A2A routes (included at the root by ``interop.urls``)."""

from django.urls import path

from interop.a2a.views import AgentCardView, AgentEndpointView

urlpatterns = [
    path(
        "a2a/<str:tenant_slug>/<str:name>/.well-known/agent-card.json",
        AgentCardView.as_view(),
        name="a2a-card",
    ),
    path("a2a/<str:tenant_slug>/<str:name>/", AgentEndpointView.as_view(), name="a2a-endpoint"),
]
