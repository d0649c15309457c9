from django.apps import AppConfig


class ThreadsConfig(AppConfig):
    name = "threads"
    default_auto_field = "django.db.models.BigAutoField"
