"""The usage ledger and its rollups, budgets (reserved before a call, committed after),
quotas and rate limits: what a tenant spends, and what it may."""
