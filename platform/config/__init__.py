"""Project configuration: settings, URLs, ASGI and Celery entry points, the environment reader."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
