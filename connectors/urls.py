from common.api import Router
from connectors.api import McpServerViewSet

router = Router()
router.register("mcp-servers", McpServerViewSet, basename="mcp-server")

urlpatterns = [*router.urls]
