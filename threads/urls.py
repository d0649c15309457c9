from django.urls import include, path

from common.api import Router
from threads.api import (
    actions,
    code,
    effects,
    endpoints,
    env,
    estimate,
    events,
    files,
    inventory,
    logs,
    messages,
    permissions,
    sessions,
    subagents,
    thread_start,
    turn_stream,
    turn_wait,
    turns,
    values,
)
from threads.api.schedules import ScheduleViewSet
from threads.api.threads import ThreadViewSet
from threads.api.webhooks import WebhookViewSet

router = Router()
router.register("threads", ThreadViewSet, basename="thread")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("webhooks", WebhookViewSet, basename="webhook")

thread_routes = [
    *messages.urlpatterns,
    *logs.urlpatterns,
    *events.urlpatterns,
    *values.urlpatterns,
    *env.urlpatterns,
    *files.urlpatterns,
    *endpoints.urlpatterns,
    *code.urlpatterns,
    *estimate.urlpatterns,
    *turns.urlpatterns,
    *turn_wait.urlpatterns,
    *subagents.urlpatterns,
    *actions.urlpatterns,
    *effects.urlpatterns,
    *inventory.urlpatterns,
]

urlpatterns = [
    *env.tenant_urlpatterns,
    *permissions.urlpatterns,
    *thread_start.urlpatterns,
    *router.urls,
    *sessions.urlpatterns,
    *turns.turn_urlpatterns,
    *turn_wait.turn_urlpatterns,
    *turn_stream.turn_urlpatterns,
    *inventory.turn_urlpatterns,
    path("threads/<uuid:thread_id>/", include(thread_routes)),
]
