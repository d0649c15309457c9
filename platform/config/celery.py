"""The Celery application. Workers use the threads pool: flows are I/O bound.

Run a worker with ``celery -A config worker --pool threads`` plus :data:`WORKER_OPTIONS`,
and beat with ``celery -A config beat``.
"""

import os
from typing import Any

import redis
from celery import Celery
from kombu.transport import redis as kombu_redis

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")  # noqa: TID251

# Workers run without gossip, mingle and worker heartbeats: the platform uses none of them
# (a thread's liveness is its Redis lock, recovery is beat's sweeper), and each adds
# broadcast queues and traffic that a broker reconnect must tear down and rebuild.
WORKER_OPTIONS = ("--without-gossip", "--without-mingle", "--without-heartbeat")


def _connparams_while_open(channel: Any, asynchronous: bool = False) -> Any:
    """kombu's Redis channel reads its connection's URL to build a client; once the
    connection is closed that URL is gone (``AttributeError: 'NoneType' object has no
    attribute 'hostname'``). A worker that loses Redis closes its connection, and closing
    its channel then asks Redis to requeue the unacknowledged messages, through a client it
    can no longer build: the AttributeError escaped as an "Unrecoverable error" and the
    worker exited. Said as the connection error it is, closing ignores it and the worker
    reconnects; the messages stay unacknowledged in Redis, where the next consumer start
    restores them after the visibility timeout, and the sweeper wakes their threads
    before that. tests/reliability/test_redis_outage.py restarts Redis under running
    flows."""
    if channel.connection.client is None:
        raise redis.exceptions.ConnectionError("the broker connection is closed")
    return _kombu_connparams(channel, asynchronous=asynchronous)


# The stubs do not know the private method.
_kombu_connparams = kombu_redis.Channel._connparams  # type: ignore[attr-defined]
kombu_redis.Channel._connparams = _connparams_while_open  # type: ignore[attr-defined]

app = Celery("platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
