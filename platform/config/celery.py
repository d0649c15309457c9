"""The Celery application. Workers use the threads pool: flows are I/O bound.

Run a worker with ``celery -A config worker --pool threads`` plus :data:`WORKER_OPTIONS`,
and beat with ``celery -A config beat``.
"""

import logging.config
import os
import warnings
from typing import Any

import kombu
import redis
from celery import Celery, signals
from celery.app.amqp import AMQP
from celery.exceptions import CPendingDeprecationWarning
from django.conf import settings
from kombu.transport import redis as kombu_redis

from config import env
from observability.logs import process_role_set

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


class BrokerConnection(kombu.Connection):
    """A broker connection whose retry loops wait at most the ``interval_start``,
    ``interval_step`` and ``interval_max`` of ``CELERY_BROKER_TRANSPORT_OPTIONS``.

    kombu reads those options only where it opens a channel for a publisher; the worker's
    consumer and beat reconnect through ``ensure_connection`` with kombu's own defaults (2 s,
    then 4, 6 … up to 30 s between tries), so a worker found Redis back up to 30 s late after
    a long outage. Here the options are ceilings on every loop; a caller asking for shorter
    waits (the publish retry policy) keeps them."""

    def _ensure_connection(  # type: ignore[override]
        self,
        errback: Any = None,
        max_retries: int | None = None,
        interval_start: float = 2,
        interval_step: float = 2,
        interval_max: float = 30,
        **options: Any,
    ) -> Any:
        ceiling = self.transport_options or {}
        return super()._ensure_connection(
            errback,
            max_retries,
            interval_start=min(interval_start, ceiling.get("interval_start", interval_start)),
            interval_step=min(interval_step, ceiling.get("interval_step", interval_step)),
            interval_max=min(interval_max, ceiling.get("interval_max", interval_max)),
            **options,
        )


class BrokerAMQP(AMQP):
    Connection = BrokerConnection


app = Celery("platform", amqp=BrokerAMQP)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Beat: its scheduler writes the heartbeat that /readyz, make run's watchdog and the probe
# `python -m config.beat_watch` read (config.beat_watch). A default: `--scheduler` or a
# CELERY_BEAT_SCHEDULER setting still chooses another.
app.add_defaults(lambda: {"beat_scheduler": "config.beat_watch:HeartbeatScheduler"})


@signals.celeryd_after_setup.connect
def _quiet_connection_loss_notice(**_: Any) -> None:
    """Celery 5 says, in seven lines at every lost broker connection, that Celery 6 will cancel
    running late-acknowledged tasks on connection loss. Flows do not depend on it (a thread's
    lock and fence, not the broker, keep one flow per thread, and
    ``CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS`` keeps them running through a
    Redis restart), so nothing in it asks an operator to act. Installed once the worker has
    set up its logging, which turns every such notice on."""
    warnings.filterwarnings(
        "ignore", message=r"\s*In Celery 5\.1 we introduced an optional breaking change",
        category=CPendingDeprecationWarning,
    )  # fmt: skip


@signals.setup_logging.connect
def _logging_from_settings(loglevel: int | str | None = None, **_: Any) -> None:
    """Workers and beat log as the web does, through ``LOGGING`` (its format, its ids, its
    filters), instead of the root handler Celery installs; ``--loglevel`` sets the root
    level. With ``LOG_FORMAT=json`` every line they log is a JSON line."""
    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)


@signals.celeryd_init.connect
def _worker_role(**_: Any) -> None:
    """Also: the warnings a worker gives as it starts (running as root, say) are log lines,
    as Django makes them later."""
    process_role_set("worker")
    logging.captureWarnings(True)


@signals.beat_init.connect
def _beat_role(**_: Any) -> None:
    process_role_set("beat")


@signals.celeryd_after_setup.connect
def _no_banner_in_json_logs(instance: Any = None, **_: Any) -> None:
    """A worker prints its banner (many lines of text) unless quiet: not with JSON logs, whose
    every line is an object. (Beat's is off with ``--quiet``, which the launcher gives it.)"""
    if instance is not None and env.log_format() == "json":
        instance.quiet = True
