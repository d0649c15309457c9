from audit.api import AuditViewSet
from common.api import Router

router = Router()
router.register("audit", AuditViewSet, basename="audit")

urlpatterns = [*router.urls]
