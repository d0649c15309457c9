"""The inputs of the definitions forms, by what a document's field holds: a scalar as a
typed input, a name of another definition with a list to pick from, a nested document (an
agent's side, a prompt's compaction) as a group of inputs named ``<field>-<key>``, a prompt's
``tools`` as rows (``tools-<n>``, ``tools-<n>-approval``, ``tools-<n>-settings``), anything
else as JSON. Each input's help is its field's documentation (:mod:`agents.field_docs`)."""

from __future__ import annotations

import json
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from django import forms
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from pydantic import BaseModel, StringConstraints
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from agents.documents import CompactionDoc, PromptDoc, SessionBinding, SideConfig, Strict
from agents.field_docs import field_doc
from common.errors import ValidationFailed
from common.parsing import json_parse

# A string field that may be longer than this (and has no pattern) is a textarea.
LONG_TEXT = 200
# A prompt's tools rows: at most this many (Django refuses a form of over 1,000 fields).
MAX_TOOL_ROWS = 200
TOOL_ROW = re.compile(r"^tools-(\d+)$")
APPROVALS = [("", "(the rules decide)"), ("allow", "allow"), ("ask", "ask a person"),
             ("deny", "deny")]  # fmt: skip

# The name fields that offer a list to pick from (a <datalist> of the page), by field.
PICKS: dict[tuple[type[BaseModel], str], str] = {
    (PromptDoc, "model"): "models",
    (CompactionDoc, "summarizer_model"): "models",
    (SideConfig, "prompt"): "prompts",
    (SideConfig, "stop_tool"): "tools",
    (SideConfig, "session_stop"): "tools",
    (SideConfig, "session_fail"): "tools",
    (SideConfig, "session_status"): "tools",
}


@dataclass(frozen=True)
class Pickers:
    """What the forms offer to pick from: the tenant's models and prompts, every name a
    ``tools`` entry may take (with what it is), and the registry's hooks (with their hook)."""

    models: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()
    tools: tuple[tuple[str, str], ...] = ()
    hooks: tuple[tuple[str, str], ...] = ()

    def datalists(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """Each list as ``(id, [(value, label)])``, for the page's ``<datalist>`` elements."""
        return [
            ("pick-models", [(name, "model") for name in self.models]),
            ("pick-prompts", [(name, "prompt") for name in self.prompts]),
            ("pick-tools", list(self.tools)),
        ]


def help_html(text: str, suffix: str = "") -> SafeString:
    """A field's documentation as help: escaped, with `code` in backticks as code."""
    html = re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text)))
    return mark_safe(html + (escape(suffix) if suffix else ""))  # noqa: S308 - escaped above


def unwrapped(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``Annotated`` and ``| None``, and whether None was allowed."""
    optional = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType) and type(None) in get_args(annotation):
            rest = [arg for arg in get_args(annotation) if arg is not type(None)]
            optional = True
            if len(rest) != 1:
                return Union[tuple(rest)], optional  # noqa: UP007 - built from a tuple
            annotation = rest[0]
        else:
            return annotation, optional


def nested_document(info: FieldInfo) -> tuple[type[Strict], bool] | None:
    """The document a field nests (an agent's side, a prompt's reasoning), and whether it
    may be left out; None for any other field."""
    annotation, optional = unwrapped(info.annotation)
    if isinstance(annotation, type) and issubclass(annotation, Strict):
        return annotation, optional
    return None


def _constraints(annotation: Any) -> list[Any]:
    """The metadata of every ``Annotated`` in ``annotation`` (through unions)."""
    if get_origin(annotation) is Annotated:
        inner, *metadata = get_args(annotation)
        return [*metadata, *_constraints(inner)]
    return [item for arg in get_args(annotation) for item in _constraints(arg)]


def _is_long_text(info: FieldInfo) -> bool:
    """A string without a pattern that may be longer than LONG_TEXT is prose (a description,
    a source); one without constraints is a name or a short value (a label, a property)."""
    for item in [*info.metadata, *_constraints(info.annotation)]:
        if isinstance(item, StringConstraints):
            return item.pattern is None and (item.max_length or 0) > LONG_TEXT
    return False


def _initial(info: FieldInfo) -> Any:
    """The default a new definition's input shows (None when there is none to show)."""
    default = info.default
    if default is PydanticUndefined or default is None or isinstance(default, list | dict):
        return None
    return default


def input_for(owner: type[BaseModel], name: str, info: FieldInfo) -> forms.Field:
    """The input for field ``name`` of document ``owner``, by its type; documented."""
    annotation, optional = unwrapped(info.annotation)
    required = info.is_required()
    doc = field_doc(owner, name)
    initial = _initial(info)
    field: forms.Field
    if annotation is bool and optional:
        field = forms.NullBooleanField(
            required=False,
            widget=forms.Select(choices=[("unknown", "(not set)"), ("true", "yes"),
                                         ("false", "no")]),
        )  # fmt: skip
    elif annotation is bool:
        field = forms.BooleanField(required=False, initial=initial)
    elif annotation is int:
        field = forms.IntegerField(required=required, initial=initial)
    elif annotation is float:
        field = forms.FloatField(required=required, initial=initial)
    elif annotation is Decimal:
        field = forms.DecimalField(required=required, initial=initial)
    elif get_origin(annotation) is Literal:
        choices = [(str(value), str(value)) for value in get_args(annotation)]
        if optional:
            choices.insert(0, ("", "(not set)"))
        field = forms.ChoiceField(choices=choices, required=required, initial=initial)
    elif annotation is str:
        pick = PICKS.get((owner, name))
        long_text = pick is None and _is_long_text(info)
        widget = forms.Textarea(attrs={"rows": 4}) if long_text else forms.TextInput(
            attrs={"list": f"pick-{pick}", "autocomplete": "off"} if pick else {}
        )  # fmt: skip
        field = forms.CharField(required=required, strip=pick is not None, widget=widget)
    elif annotation == Union[str, SessionBinding]:  # noqa: UP007 - as unwrapped() builds it
        field = NameOrJsonField(
            required=False,
            widget=forms.TextInput(attrs={"list": f"pick-{PICKS[(owner, name)]}",
                                          "autocomplete": "off"}),
        )  # fmt: skip
        doc += " A tool's name, or a JSON object {name, message_property, attachments_property}."
    else:
        field = JsonField(
            required=required,
            widget=forms.Textarea(attrs={"rows": 6, "class": "json", "spellcheck": "false"}),
        )  # fmt: skip
        doc += " (JSON" + ("" if required else "; leave empty for the default") + ")"
    field.label = name
    field.help_text = help_html(doc)
    return field


class JsonField(forms.CharField):
    """A JSON value typed as text; empty means "not given". Shown indented, or on one line
    (``indent=None``) in a one-line input."""

    def __init__(self, *, indent: int | None = 2, **kwargs: Any) -> None:
        super().__init__(strip=True, **kwargs)
        self.indent = indent

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if text is None or text in self.empty_values:
            return None
        try:
            return json_parse(text, field=str(self.label or "value"))
        except ValidationFailed as error:
            raise forms.ValidationError(error.message) from error

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, str) or value is None:
            return value
        return json.dumps(value, indent=self.indent, ensure_ascii=False)


class NameOrJsonField(JsonField):
    """A name, or (text starting with ``{``) a JSON object: a session binding."""

    def to_python(self, value: Any) -> Any:
        text = forms.CharField.to_python(self, value)
        if text is None or text in self.empty_values:
            return None
        return super().to_python(text) if text.startswith("{") else text

    def prepare_value(self, value: Any) -> Any:
        return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value


class PromptTextField(JsonField):
    """A prompt's parts: plain text when it is one text part (as a string is taken), else
    the JSON list of parts; text that starts with ``[`` is read as that list."""

    def to_python(self, value: Any) -> Any:
        text = forms.CharField.to_python(self, value)
        if text is None or text in self.empty_values:
            return None
        return super().to_python(text) if text.lstrip().startswith("[") else text

    def prepare_value(self, value: Any) -> Any:
        if (
            isinstance(value, list) and len(value) == 1 and isinstance(value[0], Mapping)
            and value[0].get("type") == "text" and isinstance(value[0].get("content"), str)
            and not value[0]["content"].lstrip().startswith("[")
        ):  # fmt: skip
            return value[0]["content"]
        return super().prepare_value(value)


def prompt_input(info: FieldInfo) -> forms.Field:
    return PromptTextField(
        required=info.is_required(), label="prompt",
        help_text=help_html(
            field_doc(PromptDoc, "prompt"),
            " As text; or a JSON list of parts ([{\"type\": \"text\", \"content\": …}, "
            "{\"type\": \"include\", \"prompt\": …}, …]).",
        ),
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "true"}),
    )  # fmt: skip


# A prompt's tools, as rows ---------------------------------------------------------------------


def tool_row_inputs(index: int) -> dict[str, forms.Field]:
    """Row ``index`` of a prompt's tools: what it names (picked from the page's list), its
    approval, and the entry's other keys as a JSON object."""
    number = index + 1
    return {
        f"tools-{index}": forms.CharField(
            label=f"Tool {number}", required=False,
            widget=forms.TextInput(attrs={"list": "pick-tools", "autocomplete": "off"}),
        ),
        f"tools-{index}-approval": forms.ChoiceField(
            label=f"Approval of tool {number}", choices=APPROVALS, required=False
        ),
        f"tools-{index}-settings": JsonField(
            label=f"Settings of tool {number}", required=False, indent=None,
            widget=forms.TextInput(attrs={"class": "json", "spellcheck": "false",
                                          "placeholder": "{}"}),
        ),
    }  # fmt: skip


def tool_row_count(data: Mapping[str, Any]) -> int:
    """How many tools rows posted ``data`` holds (the highest index, plus one)."""
    indexes = [int(found[1]) for key in data if (found := TOOL_ROW.match(key))]
    return max(indexes) + 1 if indexes else 0


def tool_row_initial(entries: object) -> dict[str, Any]:
    """A stored ``tools`` list as the rows' initial values: a name, or an object's name, its
    approval (when it is a plain decision) and its other keys."""
    initial: dict[str, Any] = {}
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, str):
            initial[f"tools-{index}"] = entry
            continue
        if not isinstance(entry, Mapping):
            continue
        rest = {key: value for key, value in entry.items() if key != "name"}
        if isinstance(rest.get("approval"), str):
            initial[f"tools-{index}-approval"] = rest.pop("approval")
        initial[f"tools-{index}"] = entry.get("name", "")
        if rest:
            initial[f"tools-{index}-settings"] = rest
    return initial


def tools_entry(name: str, approval: str, settings: object) -> tuple[Any, str | None, str]:
    """A row's ``tools`` entry: its name alone, or an object with its approval and settings;
    or None and which input is wrong (``""`` the name, ``"settings"``) and why."""
    if not name:
        if approval or settings is not None:
            return None, "", "name what the row offers, or clear the row"
        return None, None, ""
    if settings is None:
        return ({"name": name, "approval": approval} if approval else name), None, ""
    if not isinstance(settings, dict):
        return None, "settings", "must be a JSON object: the entry's keys other than its name"
    if "name" in settings:
        return None, "settings", "the row names the tool: leave name out of its settings"
    if approval and "approval" in settings:
        return None, "settings", "approval is chosen beside it: leave it out of the settings"
    return {"name": name, **settings, **({"approval": approval} if approval else {})}, None, ""
