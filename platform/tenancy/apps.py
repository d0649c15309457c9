from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "tenancy"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from common import checks  # noqa: F401 - registers the middleware deploy checks
        from tenancy import schema  # noqa: F401 - registers the OpenAPI auth extensions
        from tenancy.credentials import connect_signals

        connect_signals()  # open sockets close when their credentials go away
