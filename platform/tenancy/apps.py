from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "tenancy"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.checks import Tags, register
        from django.db.models.signals import post_migrate

        from common import checks  # noqa: F401 - registers the middleware deploy checks
        from tenancy import schema  # noqa: F401 - registers the OpenAPI auth extensions
        from tenancy.credentials import connect_signals
        from tenancy.wall import check_application_role, grant_application_role

        connect_signals()  # open sockets close when their credentials go away
        post_migrate.connect(grant_application_role, sender=self)
        register(check_application_role, Tags.database)
