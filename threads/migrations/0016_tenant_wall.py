"""The tenant wall: row-level security on this app's tenant-owned tables
(common.tenant_wall)."""

from django.db import migrations

from common.tenant_wall import TenantRowSecurity


class Migration(migrations.Migration):
    dependencies = [("threads", "0015_event_trace_ids")]

    operations = [
        TenantRowSecurity("Thread"),
        TenantRowSecurity("Message"),
        TenantRowSecurity("Log"),
        TenantRowSecurity("Action"),
        TenantRowSecurity("Event"),
        TenantRowSecurity("EventCounter"),
        TenantRowSecurity("Schedule"),
        TenantRowSecurity("ThreadFile"),
        TenantRowSecurity("ThreadValue"),
        TenantRowSecurity("ThreadEnv"),
        TenantRowSecurity("TenantEnv"),
        TenantRowSecurity("SubagentLink"),
        TenantRowSecurity("VariableRequest"),
        TenantRowSecurity("Turn"),
        TenantRowSecurity("IdempotencyKey"),
        TenantRowSecurity("ScheduledEffect"),
        TenantRowSecurity("WebhookEndpoint"),
        TenantRowSecurity("WebhookDelivery"),
    ]
