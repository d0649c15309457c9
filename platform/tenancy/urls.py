from django.urls import re_path

from common.api import Router
from tenancy.api import ApiKeyViewSet, MeView

router = Router()
router.register("api-keys", ApiKeyViewSet, basename="api-key")

urlpatterns = [
    re_path(r"^me/?$", MeView.as_view(), name="me"),
    *router.urls,
]
