import uuid

from django.apps import AppConfig
from django.db import transaction


class ThreadsConfig(AppConfig):
    name = "threads"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from usage.signals import budget_changed

        budget_changed.connect(_budget_changed, dispatch_uid="threads.waits")


def _budget_changed(sender: object, *, tenant_id: object, **_: object) -> None:
    """A budget changed: the tenant's turns waiting for room try again (once committed)."""
    from threads.services.waits import waits_release

    tenant = uuid.UUID(str(tenant_id))
    transaction.on_commit(lambda: waits_release(tenant_id=tenant), robust=True)
