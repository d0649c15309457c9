from django.urls import path

from replay.api import SessionExportView, ThreadExportView

urlpatterns = [
    path("threads/<uuid:thread_id>/export", ThreadExportView.as_view(), name="thread-export"),
    path("sessions/<uuid:session_id>/export", SessionExportView.as_view(), name="session-export"),
]
