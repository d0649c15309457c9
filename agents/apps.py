from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents import checks  # noqa: F401 - registers the system checks
        from agents.registry import autodiscover

        autodiscover()
