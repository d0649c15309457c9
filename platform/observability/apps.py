from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "observability"
    verbose_name = "Operations"

    def ready(self) -> None:
        """Install each part's hooks (imported here: they import models)."""
        from observability import logs, metrics, tracing, workers

        logs.tasks_watch()  # a Celery task's lines carry its tenant and thread
        metrics.install()  # Prometheus: events, Celery tasks, sandbox runners
        tracing.tracing_install()  # OpenTelemetry: the engine's door, spans, propagation
        workers.install()  # a worker's heartbeat in Redis, counted by /readyz
