"""The tenant wall: row-level security on this app's tenant-owned tables
(common.tenant_wall)."""

from django.db import migrations

from common.tenant_wall import TenantRowSecurity


class Migration(migrations.Migration):
    dependencies = [("connectors", "0001_initial")]

    operations = [TenantRowSecurity("McpServer")]
