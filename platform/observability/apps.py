from django.apps import AppConfig

from observability import logs


class ObservabilityConfig(AppConfig):
    name = "observability"
    verbose_name = "Operations"

    def ready(self) -> None:
        """Install what each part hooks into (one line per part)."""
        logs.tasks_watch()  # a Celery task's lines carry its tenant and thread
        from observability import metrics  # here: it imports models, ready only now

        metrics.install()  # Prometheus: events, Celery tasks, sandbox runners
        from observability import tracing  # here: it imports models, ready only now

        tracing.tracing_install()  # OpenTelemetry: the engine's door, spans, propagation
        from observability import workers

        workers.install()  # a worker's heartbeat in Redis, counted by /readyz
