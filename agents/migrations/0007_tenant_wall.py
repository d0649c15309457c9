"""The tenant wall: row-level security on this app's tenant-owned tables
(common.tenant_wall)."""

from django.db import migrations

from common.tenant_wall import TenantRowSecurity


class Migration(migrations.Migration):
    dependencies = [("agents", "0006_prompt_compaction")]

    operations = [
        TenantRowSecurity("Model"),
        TenantRowSecurity("ProviderCredential"),
        TenantRowSecurity("Prompt"),
        TenantRowSecurity("Agent"),
        TenantRowSecurity("CodeTool"),
        TenantRowSecurity("PermissionRule"),
    ]
