from django.urls import path

from compaction.api import CompactionDetailView, CompactionListView, CompactionRevertView

urlpatterns = [
    path(
        "threads/<uuid:thread_id>/compactions",
        CompactionListView.as_view(),
        name="thread-compactions",
    ),
    path(
        "threads/<uuid:thread_id>/compactions/<uuid:compaction_id>",
        CompactionDetailView.as_view(),
        name="thread-compaction-detail",
    ),
    path(
        "threads/<uuid:thread_id>/compactions/<uuid:compaction_id>/revert",
        CompactionRevertView.as_view(),
        name="thread-compaction-revert",
    ),
]
