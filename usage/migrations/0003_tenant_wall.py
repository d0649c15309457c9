"""The tenant wall: row-level security on this app's tenant-owned tables
(common.tenant_wall)."""

from django.db import migrations

from common.tenant_wall import TenantRowSecurity


class Migration(migrations.Migration):
    dependencies = [("usage", "0002_reserve_functions")]

    operations = [
        TenantRowSecurity("LedgerEntry"),
        TenantRowSecurity("Rollup"),
        TenantRowSecurity("Budget"),
        TenantRowSecurity("BudgetCounter"),
        TenantRowSecurity("Reservation"),
        TenantRowSecurity("TenantQuota"),
    ]
