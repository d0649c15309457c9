"""Logging helpers: beat's periodic sweeps run every second or two and have nothing new to say
each time, so Celery's lines about them (sent, received, succeeded) are demoted to DEBUG."""

from __future__ import annotations

import logging

from django.conf import settings


class PeriodicTasksAtDebug(logging.Filter):
    """On Celery's beat, strategy and trace loggers: a line naming one of beat's periodic
    tasks is a DEBUG line (kept only when the logger shows DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG:
            return True
        text = record.getMessage()
        if not any(task in text for task in _periodic_tasks()):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _periodic_tasks() -> set[str]:
    return {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
