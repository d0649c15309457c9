from django.apps import AppConfig


class ReplayConfig(AppConfig):
    name = "replay"
    verbose_name = "Replay and evidence export"
    default_auto_field = "django.db.models.BigAutoField"
