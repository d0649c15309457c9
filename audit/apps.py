from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from audit import logins
        from audit.services import audit_entry_create
        from common.audit import audit_recorder_set

        audit_recorder_set(audit_entry_create)
        logins.connect()
