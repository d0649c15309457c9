from django.urls import re_path

from agents.api import (
    AgentViewSet,
    BundleView,
    CodeToolViewSet,
    ModelViewSet,
    PermissionRuleViewSet,
    PromptViewSet,
    RegistryEffectsView,
    RegistryEndpointsView,
    RegistryHooksView,
    RegistryToolsView,
)
from agents.credentials_api import CredentialViewSet
from common.api import Router

router = Router()
router.register("models", ModelViewSet, basename="model")
router.register("prompts", PromptViewSet, basename="prompt")
router.register("agents", AgentViewSet, basename="agent")
router.register("code-tools", CodeToolViewSet, basename="code-tool")
router.register("permission-rules", PermissionRuleViewSet, basename="permission-rule")
router.register("credentials", CredentialViewSet, basename="credential")

urlpatterns = [
    re_path(r"^bundles/?$", BundleView.as_view(), name="bundles"),
    re_path(r"^registry/tools/?$", RegistryToolsView.as_view(), name="registry-tools"),
    re_path(r"^registry/hooks/?$", RegistryHooksView.as_view(), name="registry-hooks"),
    re_path(r"^registry/effects/?$", RegistryEffectsView.as_view(), name="registry-effects"),
    re_path(r"^registry/endpoints/?$", RegistryEndpointsView.as_view(), name="registry-endpoints"),
    *router.urls,
]
