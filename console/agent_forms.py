"""The agents pages' forms: a definition's top-level fields as inputs, and a bundle to
import. They only shape input; the definition services validate it, and a refusal is shown
at the field its path starts with (``side_a.prompt`` at ``side_a``)."""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from django import forms
from pydantic import StringConstraints
from pydantic.fields import FieldInfo

from agents.bundles import MAX_BUNDLE_BYTES
from agents.form_errors import add_definition_problems, top_field
from agents.models import DEFINITION_MODELS
from agents.services import KEEP
from agents.validation import SINGULAR, Kind
from common.errors import DomainError, LimitExceeded, ValidationFailed
from common.parsing import json_parse

# A string field longer than this (or without a pattern or a limit) is a textarea.
LONG_TEXT = 200
API_KEY = "api_key"
REMOVE_API_KEY = "remove_api_key"


def _unwrapped(annotation: Any) -> tuple[Any, bool]:
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
                return annotation, optional
            annotation = rest[0]
        else:
            return annotation, optional


def _constraints(annotation: Any) -> list[Any]:
    """The metadata of every ``Annotated`` in ``annotation`` (through unions)."""
    if get_origin(annotation) is Annotated:
        inner, *metadata = get_args(annotation)
        return [*metadata, *_constraints(inner)]
    return [item for arg in get_args(annotation) for item in _constraints(arg)]


def _is_long_text(info: FieldInfo) -> bool:
    """A string without a pattern and longer than LONG_TEXT (or unlimited) is long text."""
    for item in [*info.metadata, *_constraints(info.annotation)]:
        if isinstance(item, StringConstraints):
            return item.pattern is None and (item.max_length is None or item.max_length > LONG_TEXT)
    return True


def _input_for(info: FieldInfo) -> forms.Field:
    """The form field for one document field, by its type."""
    annotation, optional = _unwrapped(info.annotation)
    required = info.is_required()
    if annotation is bool:
        return forms.BooleanField(required=False)
    if annotation is int:
        return forms.IntegerField(required=required)
    if annotation is Decimal:
        return forms.DecimalField(required=required)
    if get_origin(annotation) is Literal:
        choices = [(str(value), str(value)) for value in get_args(annotation)]
        if optional:
            choices.insert(0, ("", "(none)"))
        return forms.ChoiceField(choices=choices, required=required)
    if annotation is str:
        widget = forms.Textarea(attrs={"rows": 4}) if _is_long_text(info) else forms.TextInput()
        return forms.CharField(required=required, strip=False, widget=widget)
    help_text = "JSON" + ("" if required else "; leave empty for the default")
    return JsonField(
        required=required, help_text=help_text,
        widget=forms.Textarea(attrs={"rows": 6, "class": "json", "spellcheck": "false"}),
    )  # fmt: skip


class JsonField(forms.CharField):
    """A JSON value typed as text; empty means "not given"."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(strip=True, **kwargs)

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
        return json.dumps(value, indent=2, ensure_ascii=False)


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


def _prompt_field(info: FieldInfo) -> forms.Field:
    return PromptTextField(
        required=info.is_required(),
        help_text="The instructions as text; or a JSON list of parts "
        '([{"type": "text", "content": …}, {"type": "include", "prompt": …}, …]).',
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "true"}),
    )


class DefinitionForm(forms.Form):
    """One definition's document, a field per top-level key (a model's also takes a
    write-only API key). ``document_data()`` is what the fields say; the services decide."""

    def __init__(self, *args: Any, kind: Kind, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind
        self.document = DEFINITION_MODELS[kind].DOCUMENT
        for name, info in self.document.model_fields.items():
            prompt = kind == "prompts" and name == "prompt"
            self.fields[name] = _prompt_field(info) if prompt else _input_for(info)
            self.fields[name].label = name
        if kind == "models":
            self.fields[API_KEY] = forms.CharField(
                label="API key", required=False, strip=False,
                widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
                help_text="Write-only: stored encrypted, never shown. Leave empty to keep "
                "the stored key.",
            )  # fmt: skip
            self.fields[REMOVE_API_KEY] = forms.BooleanField(
                label="Remove the stored API key", required=False
            )

    @staticmethod
    def initial_from(document: Mapping[str, Any]) -> dict[str, Any]:
        """Initial values from a document as JSON (an unset optional value is empty)."""
        return {name: value for name, value in document.items() if value is not None}

    def document_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.document.model_fields]

    def secret_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in (API_KEY, REMOVE_API_KEY) if name in self.fields]

    def document_data(self) -> dict[str, Any]:
        """The document the fields describe; an empty optional field takes its default."""
        data: dict[str, Any] = {}
        for name in self.document.model_fields:
            value = self.cleaned_data.get(name)
            if value is None or value == "":
                continue
            data[name] = str(value) if isinstance(value, Decimal) else value
        return data

    def api_key(self) -> object:
        """The ``api_key`` argument of ``definition_save``: KEEP, None (remove) or a key."""
        if self.kind != "models":
            return KEEP
        if self.cleaned_data.get(REMOVE_API_KEY):
            return None
        return self.cleaned_data.get(API_KEY) or KEEP

    def add_domain_error(self, error: DomainError, *, name: str | None) -> None:
        """A service's refusal: each problem in ``details`` at its field (a problem of
        another definition, named, at the top), else the message at ``error.field``."""
        if not add_definition_problems(self, error, kind=SINGULAR[self.kind], name=name):
            field = top_field(error.field or "")
            self.add_error(field if field in self.fields else None, error.message)


class BundleForm(forms.Form):
    """A bundle pasted or uploaded (YAML or JSON), and whether the bundle replaces the
    tenant's definitions (those it does not hold are deleted)."""

    document = forms.CharField(
        label="Bundle (YAML or JSON)", required=False, strip=False,
        widget=forms.Textarea(attrs={"rows": 16, "class": "json", "spellcheck": "false"}),
    )  # fmt: skip
    upload = forms.FileField(label="Or upload a bundle file", required=False)
    replace = forms.BooleanField(
        label="Also delete the definitions the bundle does not hold", required=False
    )

    def text(self) -> str:
        """The bundle's text: the uploaded file's, else the pasted one. Raises
        ValidationFailed when there is neither, or the file is not UTF-8, and LimitExceeded
        when the file is larger than a bundle may be (it is not read then: Django caps a
        form's fields, not its files)."""
        upload = self.cleaned_data.get("upload")
        if upload is not None:
            if upload.size > MAX_BUNDLE_BYTES:
                raise LimitExceeded(
                    f"the file is {upload.size} bytes; a bundle is at most {MAX_BUNDLE_BYTES} "
                    "bytes (the limit MAX_BUNDLE_BYTES)",
                    field="upload",
                )
            try:
                return str(upload.read().decode("utf-8"))
            except UnicodeDecodeError as error:
                raise ValidationFailed(
                    f"the file is not UTF-8 text: {error}", field="upload"
                ) from error
        text = str(self.cleaned_data.get("document") or "")
        if not text.strip():
            raise ValidationFailed("paste a bundle or choose a file", field="document")
        return text
