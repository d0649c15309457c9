"""The tenant wall: row-level security on this app's tenant-owned tables
(common.tenant_wall)."""

from django.db import migrations

from common.tenant_wall import TenantRowSecurity


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0003_tenant_time_zone")]

    operations = [
        TenantRowSecurity("Membership"),
        TenantRowSecurity("ApiKey"),
    ]
