"""What a thread stores: files, KV values, env variables (and the tenant's env)."""

from __future__ import annotations

from django.db import models

from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwned
from threads.models.threads import ThreadOwned


class ThreadFile(ThreadOwned):
    """A file or directory of a thread's file system (spec Threads §8 FileRecord)."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    path = models.CharField(max_length=1024)  # normalised: leading /, no trailing /
    parent_path = models.CharField(max_length=1024)  # the directory holding it ("/" at top)
    name = models.CharField(max_length=255)
    is_directory = models.BooleanField(default=False)
    mime_type = models.CharField(max_length=255, blank=True)
    size = models.BigIntegerField(default=0)
    storage = models.CharField(max_length=16, default="local")
    storage_key = models.CharField(max_length=1024, blank=True)  # name in Django storage
    metadata = models.JSONField(default=dict, blank=True)
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "path"], name="threadfile_unique_path"),
        ]
        indexes = [models.Index(fields=["thread", "parent_path"], name="threadfile_parent")]


class ThreadValue(ThreadOwned):
    """Durable per-thread KV (spec runtime §14); the JSON value is stored encrypted."""

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=255)
    value_encrypted = models.BinaryField()
    size = models.PositiveIntegerField()  # bytes of the serialised JSON
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["key"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "key"], name="threadvalue_unique_key"),
        ]


class EnvType(models.TextChoices):
    TEXT = "text"  # may appear in prompts and tool output
    SECRET = "secret"  # noqa: S105 - a type name: only inside tools; never shown


class ThreadEnv(ThreadOwned):
    """A thread env variable; the value is always stored encrypted and never shown."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=128)
    value_encrypted = models.BinaryField()
    type = models.CharField(max_length=8, choices=EnvType.choices, default=EnvType.SECRET)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "name"], name="threadenv_unique_name"),
        ]


class TenantEnv(TenantOwned):
    """A tenant-wide env variable: the tenant level of env lookups (after thread, tool
    config, agent and prompt; before the platform). Stored encrypted, never shown."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=128)
    value_encrypted = models.BinaryField()
    type = models.CharField(max_length=8, choices=EnvType.choices, default=EnvType.SECRET)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="tenantenv_unique_name"),
        ]
