from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "observability"
    verbose_name = "Operations"

    def ready(self) -> None:
        """Install what each part hooks into (one line per part)."""
