from django.urls import re_path

from agents.api import (
    AgentViewSet,
    BundleView,
    CodeToolViewSet,
    ModelViewSet,
    PermissionRuleViewSet,
    PromptViewSet,
    RegistryListingView,
)
from common.api import Router

router = Router()
router.register("models", ModelViewSet, basename="model")
router.register("prompts", PromptViewSet, basename="prompt")
router.register("agents", AgentViewSet, basename="agent")
router.register("code-tools", CodeToolViewSet, basename="code-tool")
router.register("permission-rules", PermissionRuleViewSet, basename="permission-rule")

urlpatterns = [
    re_path(r"^bundles/?$", BundleView.as_view(), name="bundles"),
    re_path(
        r"^registry/(?P<kind>tools|hooks|effects|endpoints)/?$",
        RegistryListingView.as_view(),
        name="registry-listing",
    ),
    *router.urls,
]
