from __future__ import annotations

from rest_framework import serializers

from tenancy.models import ApiKey, Role, Tenant


class TenantOutput(serializers.ModelSerializer[Tenant]):
    class Meta:
        model = Tenant
        fields = ["id", "slug", "name"]


class MeOutput(serializers.Serializer[object]):
    tenant = TenantOutput()
    role = serializers.ChoiceField(choices=Role.choices)
    kind = serializers.ChoiceField(choices=["api_key", "user"])
    api_key_id = serializers.UUIDField(allow_null=True)
    user = serializers.CharField(allow_null=True)


class WsTicketOutput(serializers.Serializer[object]):
    ticket = serializers.CharField()
    expires_in = serializers.IntegerField(help_text="seconds the ticket stays valid")


class ApiKeyOutput(serializers.ModelSerializer[ApiKey]):
    prefix = serializers.SerializerMethodField()

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "role",
            "created_at",
            "expires_at",
            "revoked",
            "revoked_at",
            "last_used_at",
        ]

    def get_prefix(self, api_key: ApiKey) -> str:
        return f"sap_{api_key.prefix}_"


class ApiKeyCreatedOutput(ApiKeyOutput):
    key = serializers.CharField(help_text="The full API key. It is shown only once.")

    class Meta(ApiKeyOutput.Meta):
        fields = [*ApiKeyOutput.Meta.fields, "key"]


class ApiKeyCreateInput(serializers.Serializer[object]):
    name = serializers.CharField(max_length=100)
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
