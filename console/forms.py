"""The console's forms: they shape input for the services, which validate it (a
``DomainError`` is shown on the field it names)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import forms

from agents.graph import GraphVariable
from common.errors import DomainError
from threads.models import RunStatus, TurnStrategy

ENV_PREFIX = "env_"


class ThreadFilterForm(forms.Form):
    q = forms.CharField(label="Search", required=False, max_length=200,
                        help_text="thread id, agent, user id or tag")  # fmt: skip
    status = forms.ChoiceField(label="Status", required=False)
    agent = forms.ChoiceField(label="Agent", required=False)
    # Off: top-level threads only, each with its subagents' threads nested under it.
    flat = forms.BooleanField(label="Subagent threads as rows of their own", required=False)

    def __init__(self, *args: Any, agents: Sequence[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["status"].choices = [("", "any status"), *RunStatus.choices]  # type: ignore[attr-defined]
        self.fields["agent"].choices = [("", "any agent"), *((a, a) for a in agents)]  # type: ignore[attr-defined]


class ThreadNewForm(forms.Form):
    agent = forms.ChoiceField(label="Agent")

    def __init__(
        self, *args: Any, agents: Sequence[str], variables: Sequence[GraphVariable], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "choose an agent"), *((a, a) for a in agents)]  # type: ignore[attr-defined]
        for variable in variables:
            described = {"aria-describedby": f"id_{self.env_field(variable.name)}-help"}
            widget = (
                forms.PasswordInput(attrs=described)
                if variable.type == "secret"
                else forms.TextInput(attrs=described)
            )
            self.fields[self.env_field(variable.name)] = forms.CharField(
                label=variable.name, required=True, widget=widget,
                help_text=f"required by {variable.declared_in}",
            )  # fmt: skip

    @staticmethod
    def env_field(name: str) -> str:
        return ENV_PREFIX + name

    def env_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name.startswith(ENV_PREFIX)]

    def add_domain_error(self, error: DomainError) -> None:
        """Show a service's refusal on the field it names (``env.NAME``, ``agent``)."""
        field = error.field or ""
        name = self.env_field(field[4:]) if field.startswith("env.") else field
        self.add_error(name if name in self.fields else None, error.message)


class MessageForm(forms.Form):
    content = forms.CharField(
        label="Message", max_length=100_000,
        widget=forms.Textarea(
            attrs={"rows": 3, "autocomplete": "off", "aria-describedby": "compose-help"}
        ),
    )  # fmt: skip
    multitask_strategy = forms.ChoiceField(
        label="If a turn is running", choices=TurnStrategy.choices, initial=TurnStrategy.ENQUEUE,
    )  # fmt: skip
