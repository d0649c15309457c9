"""The agents pages' forms: a definition as structured inputs (:mod:`console.definition_fields`),
the same definition as one JSON document (the "advanced" view), and a bundle to import. They
only shape input; the definition services validate it, and a refusal is shown at the input its
path names (``side_a.prompt`` at ``side_a-prompt``, ``tools[2].blocking`` at row 3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django import forms
from django.utils.html import format_html

from agents.bundles import MAX_BUNDLE_BYTES
from agents.documents import Strict
from agents.field_docs import field_doc
from agents.form_errors import add_definition_problems, field_of
from agents.models import DEFINITION_MODELS
from agents.services import KEEP
from agents.validation import SINGULAR, Kind
from common.errors import DomainError, LimitExceeded, ValidationFailed
from console.definition_fields import (
    MAX_TOOL_ROWS,
    JsonField,
    Pickers,
    help_html,
    input_for,
    nested_document,
    prompt_input,
    tool_row_count,
    tool_row_initial,
    tool_row_inputs,
    tools_entry,
)

API_KEY = "api_key"
REMOVE_API_KEY = "remove_api_key"
# Nested documents shown folded, under "More settings", with the fields typed as JSON.
FOLDED_GROUPS = frozenset({"reasoning", "compaction", "capabilities"})


@dataclass
class Section:
    """A part of the form as the page lays it out: ``fields`` (a definition's plain inputs),
    ``group`` (a nested document's, ``name`` its field), or ``tools`` (the rows)."""

    kind: str
    name: str = ""
    doc: str = ""
    fields: list[forms.BoundField] = field(default_factory=list)
    rows: list[list[forms.BoundField]] = field(default_factory=list)

    @property
    def invalid(self) -> bool:
        return any(bound.errors for bound in [*self.fields, *(b for row in self.rows for b in row)])


class DefinitionForm(forms.Form):
    """One definition's document as inputs (a model's also takes a write-only API key).
    ``document_data()`` is what the inputs say; the services decide."""

    def __init__(
        self, *args: Any, kind: Kind, pickers: Pickers | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind
        self.pickers = pickers or Pickers()
        self.document = DEFINITION_MODELS[kind].DOCUMENT
        self.groups: dict[str, tuple[type[Strict], bool]] = {}
        self.tool_rows = 0
        self._tools: list[Any] = []
        for name, info in self.document.model_fields.items():
            nested = nested_document(info)
            if kind == "prompts" and name == "prompt":
                self.fields[name] = prompt_input(info)
            elif kind == "prompts" and name == "tools":
                self._add_tool_rows()
            elif name == "hooks":
                self.fields[name] = self._hooks_input()
            elif nested is not None:
                self.groups[name] = nested
                for key, sub in nested[0].model_fields.items():
                    # Whether a side's prompt is missing is the service's to say (a side
                    # that may be left out is, when its inputs are empty).
                    self.fields[f"{name}-{key}"] = input_for(nested[0], key, sub)
                    self.fields[f"{name}-{key}"].required = False
                    self.fields[f"{name}-{key}"].label = format_html("<code>{}</code>", key)
            else:
                self.fields[name] = input_for(self.document, name, info)
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

    def _add_tool_rows(self) -> None:
        """As many rows as the posted form holds, else the stored tools and one empty row."""
        rows = tool_row_count(self.data) if self.is_bound else tool_row_count(self.initial) + 1
        self.tool_rows = max(1, min(rows, MAX_TOOL_ROWS))
        for index in range(self.tool_rows):
            self.fields.update(tool_row_inputs(index))
        if rows > MAX_TOOL_ROWS:
            self.too_many_tools = rows

    def _hooks_input(self) -> forms.Field:
        """The registry's hooks as checkboxes, those listed first in their order (hooks run
        in the order listed), then the others by name."""
        if self.is_bound:
            posted = self.data.getlist("hooks") if hasattr(self.data, "getlist") else []
            listed = [str(name) for name in posted]
        else:
            listed = list(self.initial.get("hooks") or [])
        hooks = dict(self.pickers.hooks)
        names = [*dict.fromkeys(listed), *sorted(set(hooks) - set(listed))]
        choices = [(name, f"{name} ({hooks.get(name, 'not in the registry')})")
                   for name in names]  # fmt: skip
        doc = field_doc(self.document, "hooks")
        if not choices:
            doc += " The registry offers this tenant no hooks."
        return forms.MultipleChoiceField(
            label="hooks", required=False, choices=choices,
            widget=forms.CheckboxSelectMultiple, help_text=help_html(doc),
        )  # fmt: skip

    @staticmethod
    def initial_from(kind: Kind, document: Mapping[str, Any]) -> dict[str, Any]:
        """A document's values as the inputs' initial values: a nested document's keys as
        ``<field>-<key>``, a prompt's tools as rows; an unset optional value is left empty."""
        fields = DEFINITION_MODELS[kind].DOCUMENT.model_fields
        initial: dict[str, Any] = {}
        for name, value in document.items():
            if value is None or name not in fields:
                continue
            if kind == "prompts" and name == "tools":
                initial.update(tool_row_initial(value))
            elif nested_document(fields[name]) is not None and isinstance(value, Mapping):
                initial.update({f"{name}-{key}": sub for key, sub in value.items()
                                if sub is not None})  # fmt: skip
            else:
                initial[name] = value
        return initial

    # Layout --------------------------------------------------------------------------------

    def sections(self) -> tuple[list[Section], list[Section]]:
        """The page's sections: those shown, and those folded under "More settings"."""
        shown: list[Section] = [Section("fields")]
        folded: list[Section] = [Section("fields")]
        for name in self.document.model_fields:
            if name in self.groups:
                model, _ = self.groups[name]
                section = Section(
                    "group", name, help_html(field_doc(self.document, name)),
                    [self[f"{name}-{key}"] for key in model.model_fields],
                )  # fmt: skip
                (folded if name in FOLDED_GROUPS else shown).append(section)
            elif name == "tools" and self.tool_rows:
                rows = [[self[f"tools-{i}"], self[f"tools-{i}-approval"],
                         self[f"tools-{i}-settings"]] for i in range(self.tool_rows)]  # fmt: skip
                shown.append(
                    Section("tools", name, help_html(field_doc(self.document, name)), rows=rows)
                )
            elif name in self.fields:
                bound = self[name]
                plain = not isinstance(bound.field, JsonField) or name == "prompt"
                (shown if plain else folded)[0].fields.append(bound)
        folded = [section for section in folded if section.fields or section.kind != "fields"]
        return shown, folded

    def secret_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in (API_KEY, REMOVE_API_KEY) if name in self.fields]

    # Reading -------------------------------------------------------------------------------

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if getattr(self, "too_many_tools", 0):
            self.add_error(None, f"a prompt lists at most {MAX_TOOL_ROWS} tools here "
                           f"(MAX_TOOL_ROWS); this form holds {self.too_many_tools}: "
                           "use the JSON view or a bundle")  # fmt: skip
        self._tools = []
        for index in range(self.tool_rows):
            name = str(cleaned.get(f"tools-{index}") or "").strip()
            if f"tools-{index}-settings" in self.errors:
                continue
            entry, wrong, why = tools_entry(
                name, str(cleaned.get(f"tools-{index}-approval") or ""),
                cleaned.get(f"tools-{index}-settings"),
            )  # fmt: skip
            if wrong is not None:
                self.add_error(f"tools-{index}" + (f"-{wrong}" if wrong else ""), why)
            elif entry is not None:
                self._tools.append(entry)
        return cleaned

    def definition_name(self, current: str | None) -> object:
        return self.cleaned_data.get("name") or current

    def document_data(self) -> dict[str, Any]:
        """The document the inputs describe; an empty optional input takes its default, a
        nested document that may be left out is when none of its inputs say anything (its
        checkboxes aside)."""
        data: dict[str, Any] = {}
        for name in self.document.model_fields:
            if name in self.groups:
                value: Any = self._group_data(name)
            elif name == "tools" and self.tool_rows:
                value = self._tools or None
            else:
                value = self.cleaned_data.get(name)
            if value is None or value == "" or value == []:
                continue
            data[name] = str(value) if isinstance(value, Decimal) else value
        return data

    def _group_data(self, name: str) -> dict[str, Any] | None:
        model, optional = self.groups[name]
        values: dict[str, Any] = {}
        said = False
        for key in model.model_fields:
            value = self.cleaned_data.get(f"{name}-{key}")
            if value is None or value == "":
                continue
            values[key] = str(value) if isinstance(value, Decimal) else value
            said = said or not _checkbox(self.fields[f"{name}-{key}"])
        return values if said or not optional else None

    def api_key(self) -> object:
        """The ``api_key`` argument of ``definition_save``: KEEP, None (remove) or a key."""
        if self.kind != "models":
            return KEEP
        if self.cleaned_data.get(REMOVE_API_KEY):
            return None
        return self.cleaned_data.get(API_KEY) or KEEP

    def add_domain_error(self, error: DomainError, *, name: object) -> None:
        """A service's refusal: each problem in ``details`` at the input its path names (a
        problem of another definition, named, at the top), else the message at
        ``error.field``."""
        if not add_definition_problems(self, error, kind=SINGULAR[self.kind], name=name):
            self.add_error(field_of(self, error.field or ""), error.message)


def _checkbox(field: forms.Field) -> bool:
    """A yes/no checkbox: always says something, so it alone does not make a nested
    document present (a select of yes, no and not set does)."""
    return isinstance(field, forms.BooleanField) and not isinstance(field, forms.NullBooleanField)


class DefinitionJsonForm(forms.Form):
    """A definition as one JSON document (the "advanced" view): every field, as the API
    takes it."""

    document = JsonField(
        label="Definition (JSON)",
        widget=forms.Textarea(attrs={"rows": 24, "class": "json", "spellcheck": "false"}),
        help_text="The whole document, as PUT /api/v1/<kind>/<name> takes it.",
    )

    def __init__(self, *args: Any, kind: Kind, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind

    def clean_document(self) -> dict[str, Any]:
        value = self.cleaned_data.get("document")
        if not isinstance(value, dict):
            raise forms.ValidationError("must be a JSON object: the definition's fields")
        return value

    def definition_name(self, current: str | None) -> object:
        return self.cleaned_data.get("document", {}).get("name") or current

    def document_data(self) -> dict[str, Any]:
        data: dict[str, Any] = self.cleaned_data["document"]
        return data

    def api_key(self) -> object:
        return KEEP

    def add_domain_error(self, error: DomainError, *, name: object) -> None:
        if not add_definition_problems(self, error, kind=SINGULAR[self.kind], name=name):
            path = error.field or ""
            self.add_error(None, f"{path}: {error.message}" if path else error.message)


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
