"""Strict inputs: a JSON body holds only the keys its route knows.

A DRF serializer drops a key it does not declare, so a typo ran as if the field were left
out (``multitask_stratgy`` queued behind the running turn, ``expires`` made a key that never
expires). :class:`StrictInput`, the base of every input serializer, refuses such a key
before any field is validated: a ValidationFailed (400) whose ``field`` is the key's full
path (``input.sileent``, ``tools[2].nmae``) and whose message names the nearest known key
(``unknown field 'sileent' (did you mean 'silent'?)``). It walks nested serializers, lists
and maps of them; a free-form field (``DictField``, ``JSONField``) stays free-form.

Why a base class, and why it cannot be forgotten. The check belongs where the fields are
declared: a parser or a view mixin does not know a route's fields, and a second copy of
them would drift. A base class alone could be left out, so the schema generator
(:class:`common.schema.AutoSchema`) refuses to document a request body whose serializer, or
one nested in it, is not a StrictInput: the schema is built by ``make lint``, by its tests
and at ``/api/schema/``, so a route with a lax input cannot pass them. That is also what
lets the schema mark every request object ``additionalProperties: false``. A route that
reads its body by hand (its checks need the database, or the body is a definitions
document) checks keys with :func:`common.payloads.object_body` or pydantic's
``extra="forbid"``; tests/common/test_strict_inputs.py sends an unknown key to every
operation of the schema that takes a JSON object and expects the 400 naming it, so those
are covered without being listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from common.payloads import known_keys_check


class StrictInput(serializers.Serializer[Any]):
    """An input serializer that refuses an unknown key anywhere in its data (see the module
    docstring). Used as a nested field, the outermost StrictInput checks for it."""

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if self.root is self:
            strict_check(self, data)
        return super().run_validation(data)


class StrictMapField(serializers.DictField):
    """A map whose object values are ``value_input``'s data (a string value, or any value
    that is not an object, is the field's own to check): the strict check walks into them."""

    value_input: StrictInput


def strict_check(field: serializers.Field[Any, Any, Any, Any], data: Any, path: str = "") -> None:
    """Raise ValidationFailed for the first key of ``data`` that ``field`` (a serializer,
    a list or map of them) does not declare, naming its path under ``path``. A value of
    the wrong type is left to the field's own validation."""
    if isinstance(field, serializers.ListSerializer | serializers.ListField):
        if isinstance(data, list) and field.child is not None:
            for index, item in enumerate(data):
                strict_check(field.child, item, f"{path}[{index}]")
        return
    if not isinstance(data, Mapping):
        return
    if isinstance(field, serializers.Serializer):
        fields = {name: child for name, child in field.fields.items() if not child.read_only}
        known_keys_check(data, list(fields), path=path)
        for key, value in data.items():
            strict_check(fields[key], value, f"{path}.{key}" if path else str(key))
    elif isinstance(field, serializers.DictField):
        child = field.value_input if isinstance(field, StrictMapField) else field.child
        for key, value in data.items():
            strict_check(child, value, f"{path}.{key}" if path else str(key))
