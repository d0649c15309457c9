"""Tenants, memberships and API keys; tenant scoping and authentication for DRF and Channels."""
