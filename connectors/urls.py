from common.api import Router
from connectors.api import A2aAgentViewSet, McpServerViewSet

router = Router()
router.register("mcp-servers", McpServerViewSet, basename="mcp-server")
router.register("a2a-agents", A2aAgentViewSet, basename="a2a-agent")

urlpatterns = [*router.urls]
