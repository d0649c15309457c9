from django.urls import path

from retention.api import ThreadStorageView

urlpatterns = [
    path("threads/<uuid:thread_id>/storage", ThreadStorageView.as_view(), name="thread-storage"),
]
