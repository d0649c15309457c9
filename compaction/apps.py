from django.apps import AppConfig


class CompactionConfig(AppConfig):
    name = "compaction"
    verbose_name = "Context compaction"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from compaction.manager import Compactor
        from threads.runtime.engine.context_door import context_manager_set

        context_manager_set(Compactor())
