"""Registrations discovered by tests/agents/registry/test_discovery.py."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agents.registry import HookName, VariableDefinition, effect, hook, thread_endpoint, tool


class LineItem(BaseModel):
    sku: str
    qty: int = Field(ge=1)


class InvoiceArgs(BaseModel):
    customer: str
    items: list[LineItem]


@tool(
    description="Send an invoice to a customer.",
    args=InvoiceArgs,
    variables=[
        VariableDefinition(
            name="BILLING_API_KEY", type="secret", required=True, description="Billing API key"
        )
    ],
    progress_argument="customer",
)
def demo_send_invoice(state: Any, args: InvoiceArgs) -> str:
    return f"invoiced {args.customer} for {sum(item.qty for item in args.items)} items"


@hook(HookName.AFTER_CREATE_MESSAGE, id="demo_audit_message")
def demo_audit_message(state: Any, message: Any, context: Any) -> None:
    return None


@effect(
    description="Remind the customer later.",
    args={"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
)
def demo_remind(state: Any, args: dict[str, Any]) -> None:
    return None


@thread_endpoint("demo/reports/[id]")
def demo_report(request: Any, state: Any, params: dict[str, str]) -> dict[str, str]:
    return {"report": params["id"]}


@thread_endpoint("demo/files/[*]", methods=["get", "post"], public=True)
def demo_files(request: Any, state: Any, params: dict[str, str]) -> dict[str, str]:
    return {"path": params["*"]}
