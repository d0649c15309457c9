"""The Celery application. Workers use the threads pool: flows are I/O bound.

Run a worker with ``celery -A config worker`` and beat with ``celery -A config beat``.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")  # noqa: TID251

app = Celery("platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
