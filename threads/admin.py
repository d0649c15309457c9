"""Threads in the admin. Rows are read-only: what changes a thread goes through its services
(stop and terminate through ``threads.services.control``, delete through ``thread_delete``),
so statuses and events are written by the one door. A thread's page shows its latest turns,
messages and events inline, with links to every one (paginated). Encrypted values (env, KV)
never appear: only their names, types and sizes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from common.errors import DomainError
from tenancy.admin import TenantScopedAdmin, TenantScopedInline, role_allows
from tenancy.models import Role
from threads.models import (
    Action,
    Event,
    Log,
    Message,
    TenantEnv,
    Thread,
    ThreadEnv,
    ThreadFile,
    ThreadValue,
    Turn,
)
from threads.services.control import thread_stop, thread_terminate
from threads.services.threads import thread_delete


class RecordAdmin(TenantScopedAdmin[Any]):
    """Rows written only by the runtime: viewed here, changed through services."""

    can_add = False
    can_change = False
    can_delete = False
    list_filter = ["tenant"]


# Inlines ----------------------------------------------------------------------------------------


class LatestInline(TenantScopedInline[Any]):
    """The newest ``limit`` rows of a thread, oldest of them first; a thread may hold
    thousands, so the thread page links to the full, paginated list."""

    read_only = True
    can_delete = False
    show_change_link = True
    limit: ClassVar[int] = 50
    order_field: ClassVar[str]

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset: type[BaseInlineFormSet[Any, Any, Any]] = super().get_formset(
            request, obj, **kwargs
        )
        limit, order = self.limit, self.order_field

        class Latest(formset):  # type: ignore[valid-type, misc]
            def get_queryset(self) -> Any:
                if not hasattr(self, "_latest"):
                    newest = list(self.queryset.order_by(f"-{order}")[:limit])
                    self._latest = newest[::-1]
                return self._latest

        return Latest


class TurnInline(LatestInline):
    model = Turn
    fk_name = "thread"
    verbose_name_plural = "latest turns"
    order_field = "position"
    limit = 20
    fields = ["position", "kind", "source", "status", "outcome", "created_at", "ended_at"]


class MessageInline(LatestInline):
    model = Message
    verbose_name_plural = "latest messages"
    order_field = "seq"
    fields = ["seq", "role", "side", "content", "name", "tool_status", "silent", "created_at"]


class EventInline(LatestInline):
    model = Event
    verbose_name_plural = "latest events"
    order_field = "sequence"
    fields = ["sequence", "type", "turn_id", "tool_call_id", "payload", "created_at"]


# Threads ----------------------------------------------------------------------------------------

Control = Callable[[Thread], str]


def _stop(thread: Thread) -> str:
    result = thread_stop(thread=thread)
    if result.stopped_turn is None and result.parked == 0:
        return "nothing was running or waiting"
    running = "stopped its running turn" if result.stopped_turn is not None else "nothing ran"
    return f"{running}, parked {result.parked} waiting turn(s)"


def _terminate(thread: Thread) -> str:
    return "terminated" if thread_terminate(thread=thread) else "was already terminated"


CONTROLS: dict[str, Control] = {"stop": _stop, "terminate": _terminate}


@admin.register(Thread)
class ThreadAdmin(RecordAdmin):
    """Search matches a thread's id, agent, user or the content of its messages."""

    can_delete = True
    change_form_template = "admin/threads/thread/change_form.html"
    list_display = [
        "id", "tenant", "agent_name", "user_id", "status", "stop_requested", "created_at",
        "last_activity_at",
    ]  # fmt: skip
    list_filter = ["tenant", "status"]
    list_select_related = ["tenant"]
    search_fields = ["id", "agent_name", "user_id"]
    readonly_fields = ["all_turns", "all_messages", "all_events"]
    inlines = [TurnInline, MessageInline, EventInline]
    actions = ["stop_threads", "terminate_threads"]

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Thread], search_term: str
    ) -> tuple[QuerySet[Thread], bool]:
        found, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term:
            said = Message.objects.filter(
                thread=OuterRef("pk"), tenant=OuterRef("tenant"), content__icontains=term
            )
            found = found | queryset.filter(Exists(said))
        return found, duplicates

    def _linked_count(self, obj: Thread, model: type[Any], noun: str) -> str:
        count = model.objects.filter(thread_id=obj.pk).count()
        opts = model._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        return format_html('<a href="{}?thread={}">all {} {}</a>', url, obj.pk, count, noun)

    @admin.display(description="turns")
    def all_turns(self, obj: Thread) -> str:
        return self._linked_count(obj, Turn, "turns")

    @admin.display(description="messages")
    def all_messages(self, obj: Thread) -> str:
        return self._linked_count(obj, Message, "messages")

    @admin.display(description="events")
    def all_events(self, obj: Thread) -> str:
        return self._linked_count(obj, Event, "events")

    # Stop and terminate: list actions and buttons on the thread's page.

    def has_control_permission(self, request: HttpRequest, obj: Thread | None = None) -> bool:
        return role_allows(request, Role.MEMBER, None if obj is None else obj.tenant_id)

    def _control(self, request: HttpRequest, threads: Iterable[Thread], control: str) -> None:
        for thread in threads:
            if not self.has_control_permission(request, thread):
                self.message_user(request, f"Thread {thread.pk}: not allowed.", messages.ERROR)
                continue
            try:
                outcome = CONTROLS[control](thread)
            except DomainError as error:
                self.message_user(request, f"Thread {thread.pk}: {error.message}", messages.ERROR)
            else:
                self.message_user(request, f"Thread {thread.pk}: {outcome}.")

    @admin.action(description="Stop selected threads", permissions=["control"])
    def stop_threads(self, request: HttpRequest, queryset: QuerySet[Thread]) -> None:
        self._control(request, queryset.select_related("tenant"), "stop")

    @admin.action(description="Terminate selected threads", permissions=["control"])
    def terminate_threads(self, request: HttpRequest, queryset: QuerySet[Thread]) -> None:
        self._control(request, queryset.select_related("tenant"), "terminate")

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                f"<path:object_id>/{control}/",
                self.admin_site.admin_view(require_POST(self._control_view)),
                {"control": control},
                name=f"threads_thread_{control}",
            )
            for control in CONTROLS
        ]
        return [*own, *super().get_urls()]

    def _control_view(self, request: HttpRequest, object_id: str, control: str) -> HttpResponse:
        thread = self.get_object(request, unquote(object_id))
        if thread is None:
            raise Http404("no such thread")
        if not self.has_control_permission(request, thread):
            raise PermissionDenied
        self._control(request, [thread], control)
        return HttpResponseRedirect(reverse("admin:threads_thread_change", args=[thread.pk]))

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        obj = kwargs.get("obj")
        context["can_control"] = obj is not None and self.has_control_permission(request, obj)
        return super().render_change_form(request, context, *args, **kwargs)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        """What a delete removes, as counts: a thread's rows go with it through
        ``thread_delete`` (listing thousands of messages helps no one), and deleting them
        needs only the permission to delete the thread."""
        threads = list(objs)
        counts = {
            str(model._meta.verbose_name_plural): model.objects.filter(thread__in=threads).count()
            for model in (Turn, Message, Event, Log, ThreadFile)
        }
        return [str(thread) for thread in threads], {"threads": len(threads), **counts}, set(), []

    def delete_model(self, request: HttpRequest, obj: Thread) -> None:
        thread_delete(thread=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Thread]) -> None:
        for thread in queryset:
            thread_delete(thread=thread)


# What a thread owns -----------------------------------------------------------------------------


@admin.register(Turn)
class TurnAdmin(RecordAdmin):
    list_display = ["id", "thread", "position", "kind", "source", "status", "outcome",
                    "created_at", "ended_at"]  # fmt: skip
    list_filter = ["tenant", "status", "kind"]
    search_fields = ["id", "thread__id"]


@admin.register(Message)
class MessageAdmin(RecordAdmin):
    list_display = ["id", "thread", "seq", "role", "silent", "status", "created_at"]
    list_filter = ["tenant", "role"]
    search_fields = ["thread__id", "content"]


@admin.register(Event)
class EventAdmin(RecordAdmin):
    list_display = ["sequence", "type", "thread", "turn_id", "created_at"]
    list_filter = ["tenant", "type"]
    search_fields = ["thread__id", "=turn_id", "type"]


@admin.register(Action)
class ActionAdmin(RecordAdmin):
    """What turns wait for a person to decide; answered through the API (respond_action)."""

    list_display = ["id", "thread", "kind", "tool_name", "status", "created_at", "expires_at"]
    list_filter = ["tenant", "kind", "status"]
    search_fields = ["id", "thread__id", "tool_name"]


@admin.register(Log)
class LogAdmin(RecordAdmin):
    list_display = ["id", "thread", "kind", "created_at"]
    list_filter = ["tenant", "kind"]


@admin.register(ThreadFile)
class ThreadFileAdmin(RecordAdmin):
    list_display = ["path", "thread", "is_directory", "mime_type", "size", "updated_at"]
    search_fields = ["path", "thread__id"]


@admin.register(ThreadValue)
class ThreadValueAdmin(RecordAdmin):
    list_display = ["key", "thread", "size", "updated_at"]
    exclude = ["value_encrypted"]


@admin.register(ThreadEnv)
class ThreadEnvAdmin(RecordAdmin):
    list_display = ["name", "thread", "type", "updated_at"]
    exclude = ["value_encrypted"]


@admin.register(TenantEnv)
class TenantEnvAdmin(RecordAdmin):
    list_display = ["name", "tenant", "type", "updated_at"]
    exclude = ["value_encrypted"]
