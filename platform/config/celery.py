"""The Celery application. Workers use the threads pool: flows are I/O bound.

Run a worker with ``celery -A config worker --pool threads`` plus :data:`WORKER_OPTIONS`,
and beat with ``celery -A config beat``.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")  # noqa: TID251

# Workers run without gossip, mingle and worker heartbeats: the platform uses none of them
# (a thread's liveness is its Redis lock, recovery is beat's sweeper), and each adds
# broadcast queues and traffic that a broker reconnect must tear down and rebuild. The
# crash reported after a Redis restart (AttributeError: 'NoneType' object has no attribute
# 'hostname', the worker exiting) is kombu's Redis transport building a connection pool
# for a channel of a connection it already closed (``_connparams`` reads
# ``connection.client``, which closing set to None). tests/reliability/test_redis_outage.py
# restarts Redis five times under running flows, and make run and the deploy recipe
# restart a worker that exits anyway.
WORKER_OPTIONS = ("--without-gossip", "--without-mingle", "--without-heartbeat")

app = Celery("platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
