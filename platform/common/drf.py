"""DRF plug-ins (kept apart from :mod:`common.api`, which DRF's own views import): the JSON
parser every route uses and what ``OPTIONS`` answers (both named in settings), and the
renderer a streamed route negotiates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rest_framework import exceptions
from rest_framework.metadata import BaseMetadata
from rest_framework.parsers import JSONParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request

from common.payloads import MAX_DEPTH, payload_check

if TYPE_CHECKING:
    from rest_framework.views import APIView


class CheckedJSONParser(JSONParser):
    """JSON bodies, refused with a 400 naming the field when they hold what the platform
    cannot take (:mod:`common.payloads`): deep nesting, NUL, lone surrogates, infinities."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as error:
            raise exceptions.ParseError(
                f"JSON parse error: nested more than {MAX_DEPTH} levels deep"
            ) from error
        payload_check(data)
        return data


class RouteMetadata(BaseMetadata):
    """What ``OPTIONS`` answers on every route: its name, description, methods and media
    types (the OpenAPI schema at /api/schema/ describes the bodies)."""

    def determine_metadata(self, request: Request, view: APIView) -> dict[str, Any]:
        return {
            "name": view.get_view_name(),
            "description": view.get_view_description(),
            "allowed_methods": list(view.allowed_methods),
            "renders": [renderer.media_type for renderer in view.renderer_classes],
            "parses": [parser.media_type for parser in view.parser_classes],
        }


class StreamRenderer(BaseRenderer):
    """Lets a streamed route's own media type (a subclass's ``media_type``) through content
    negotiation: the stream itself is a streamed response, never rendered; what is rendered
    (an error) answers JSON."""

    charset = None

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        rendered: bytes = JSONRenderer().render(data)
        return rendered
