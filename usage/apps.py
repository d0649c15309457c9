from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "usage"
    verbose_name = "Usage, budgets and quotas"
    default_auto_field = "django.db.models.BigAutoField"
