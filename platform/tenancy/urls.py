from django.urls import re_path

from common.api import Router
from tenancy.api import ApiKeyViewSet, MeView, WsTicketView

router = Router()
router.register("api-keys", ApiKeyViewSet, basename="api-key")

# `(?:/)?`, not `/?`: either way a trailing slash is optional, and this way the OpenAPI
# schema names the operations without one (`/api/v1/me`).
urlpatterns = [
    re_path(r"^me(?:/)?$", MeView.as_view(), name="me"),
    re_path(r"^ws-tickets(?:/)?$", WsTicketView.as_view(), name="ws-tickets"),
    *router.urls,
]
