from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError, field_validator

from agents.registry import (
    NO_ARGS_SCHEMA,
    HookName,
    Registry,
    RegistryError,
    VariableDefinition,
    effect,
    hook,
    registry,
    thread_endpoint,
    tool,
    use_registry,
)
from agents.schemas import ArgumentsInvalid, SchemaProblem

HERE = __name__


class WeatherArgs(BaseModel):
    city: str
    days: int = Field(default=1, ge=1)


def test_tool_records_an_entry_and_returns_the_function_unchanged(reg: Registry) -> None:
    def get_weather(state: Any, args: WeatherArgs) -> str:
        return f"sunny in {args.city}"

    decorated = tool(description="  Current weather.  ", args=WeatherArgs)(get_weather)

    assert decorated is get_weather
    entry = reg.tools["get_weather"]
    assert entry.name == "get_weather"
    assert entry.description == "Current weather."
    assert entry.args_schema == WeatherArgs.model_json_schema()
    assert entry.pydantic_model is WeatherArgs
    assert entry.function is get_weather
    assert entry.module == HERE
    assert entry.origin == f"{HERE}.{get_weather.__qualname__}"
    assert entry.takes_args is True
    assert entry.variables == ()
    assert entry.progress_argument is None


def test_tool_name_variables_and_progress_argument_are_recorded(reg: Registry) -> None:
    key = VariableDefinition(name="WEATHER_KEY", type="secret", required=True, description="Key")

    @tool(
        description="Weather.",
        args=WeatherArgs,
        name="weather_now",
        variables=[key],
        progress_argument="city",
    )
    def anything(state: Any, args: WeatherArgs) -> str:
        return "ok"

    entry = reg.tool("weather_now")
    assert entry is not None
    assert entry.variables == (key,)
    assert entry.progress_argument == "city"
    assert reg.tool_names() == ["weather_now"]


def test_a_tool_parses_arguments_into_its_pydantic_model(reg: Registry) -> None:
    @tool(description="Weather.", args=WeatherArgs)
    def get_weather(state: Any, args: WeatherArgs) -> str:
        return args.city

    entry = reg.tools["get_weather"]
    parsed = entry.parse_args({"city": "Oslo"})

    assert parsed == WeatherArgs(city="Oslo", days=1)
    assert get_weather(None, parsed) == "Oslo"
    with pytest.raises(ArgumentsInvalid) as caught:
        entry.parse_args({"days": 0})
    assert caught.value.message == (
        "Tool argument validation failed: [city] is a required property; "
        "[days] 0 is less than the minimum of 1"
    )


def test_a_pydantic_only_rule_still_fails_as_arguments_invalid_with_a_path(reg: Registry) -> None:
    class Even(BaseModel):
        n: int

        @field_validator("n")
        @classmethod
        def even(cls, value: int) -> int:
            if value % 2:
                raise ValueError("must be even")
            return value

    @tool(description="Even.", args=Even)
    def halve(state: Any, args: Even) -> int:
        return args.n // 2

    with pytest.raises(ArgumentsInvalid) as caught:
        reg.tools["halve"].parse_args({"n": 3})

    assert caught.value.errors == [SchemaProblem("n", "Value error, must be even")]
    assert caught.value.field == "n"


def test_a_tool_with_a_json_schema_parses_into_a_dict(reg: Registry) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    @tool(description="Search.", args=schema)
    def search(state: Any, args: dict[str, Any]) -> str:
        return str(args["q"])

    entry = reg.tools["search"]
    assert entry.pydantic_model is None
    assert entry.args_schema == schema
    assert entry.parse_args({"q": "x"}) == {"q": "x"}


def test_a_tool_without_args_has_an_empty_object_schema_and_refuses_arguments(
    reg: Registry,
) -> None:
    @tool(description="The time.")
    def now(state: Any) -> str:
        return "noon"

    entry = reg.tools["now"]
    assert entry.args_schema == dict(NO_ARGS_SCHEMA)
    assert entry.takes_args is False
    assert entry.parse_args(None) == {}
    with pytest.raises(ArgumentsInvalid, match=r"\[\$\] this tool takes no arguments"):
        entry.parse_args({"tz": "UTC"})


@pytest.mark.parametrize(
    "name", ["GetWeather", "get-weather", "get__weather", "_private", "1st_tool", "get_", ""]
)
def test_tool_names_must_be_snake_case(reg: Registry, name: str) -> None:
    def fn(state: Any) -> None:
        return None

    with pytest.raises(RegistryError) as caught:
        tool(description="x", name=name)(fn)

    assert caught.value.message == (
        f"Tool name {name!r} at {HERE}.{fn.__qualname__} must be snake_case (e.g. get_weather)"
    )
    assert reg.tools == {}


def test_a_function_named_in_camel_case_needs_an_explicit_name(reg: Registry) -> None:
    def getWeather(state: Any) -> None:  # noqa: N802 - the name is the point
        return None

    with pytest.raises(RegistryError, match="'getWeather'"):
        tool(description="x")(getWeather)
    tool(description="x", name="get_weather")(getWeather)
    assert reg.tool("get_weather") is not None


def test_tool_names_are_capped_at_64_characters(reg: Registry) -> None:
    def fn(state: Any) -> None:
        return None

    tool(description="x", name="a" * 64)(fn)
    with pytest.raises(RegistryError, match="exceeds 64 characters"):
        tool(description="x", name="b" * 65)(fn)


@pytest.mark.parametrize("description", ["", "   "])
def test_a_tool_needs_a_description(reg: Registry, description: str) -> None:
    def fn(state: Any) -> None:
        return None

    with pytest.raises(RegistryError, match=r"needs a non-empty description"):
        tool(description=description)(fn)


def test_a_bad_args_schema_is_refused_naming_the_path_and_the_function(reg: Registry) -> None:
    def lookup(state: Any, args: Any) -> None:
        return None

    with pytest.raises(RegistryError) as caught:
        tool(description="x", args={"type": "object", "properties": {"id": {"type": "uuid"}}})(
            lookup
        )

    assert caught.value.message.startswith(f"args of {HERE}.{lookup.__qualname__}: ")
    assert "[properties.id.type] 'uuid' is not valid under any of the given schemas" in str(
        caught.value
    )


def test_progress_argument_must_name_an_argument(reg: Registry) -> None:
    def fn(state: Any, args: WeatherArgs) -> None:
        return None

    with pytest.raises(RegistryError, match="progress_argument 'town' of tool 'fn'"):
        tool(description="x", args=WeatherArgs, progress_argument="town")(fn)
    with pytest.raises(RegistryError, match="progress_argument 'city'"):
        tool(description="x", progress_argument="city")(fn)


def _tool_named(name: str) -> Any:
    """A fresh function each call, all sharing one qualname (like a module executed twice)."""

    def same_place(state: Any) -> None:
        return None

    return tool(description="x", name=name)(same_place)


def test_a_duplicate_tool_name_names_both_definitions(reg: Registry) -> None:
    def first(state: Any) -> None:
        return None

    def second(state: Any) -> None:
        return None

    tool(description="x", name="send")(first)
    with pytest.raises(RegistryError) as caught:
        tool(description="y", name="send")(second)

    assert caught.value.message == (
        f"Tool 'send' defined at {HERE}.{second.__qualname__} is already registered by "
        f"{HERE}.{first.__qualname__}"
    )
    assert reg.tools["send"].function is first


def test_re_registering_from_the_same_qualname_replaces_silently(reg: Registry) -> None:
    old = _tool_named("send")
    new = _tool_named("send")

    assert old is not new
    assert reg.tools["send"].function is new
    assert list(reg.tools) == ["send"]


def test_hook_records_an_entry_for_an_enum_or_a_string(reg: Registry) -> None:
    def audit(state: Any, message: Any, context: Any) -> None:
        return None

    def trim(state: Any, messages: list[Any], context: Any) -> list[Any]:
        return messages

    assert hook(HookName.AFTER_CREATE_MESSAGE, id="audit_messages")(audit) is audit
    hook("filter_messages")(trim)

    assert reg.hooks["audit_messages"].hook is HookName.AFTER_CREATE_MESSAGE
    assert reg.hooks["audit_messages"].function is audit
    assert reg.hooks["audit_messages"].module == HERE
    assert reg.hook("trim") is not None
    assert reg.hooks["trim"].hook is HookName.FILTER_MESSAGES
    assert reg.hook_ids() == ["audit_messages", "trim"]
    assert [entry.id for entry in reg.hooks_for("filter_messages")] == ["trim"]


def test_an_unknown_hook_name_is_refused_with_a_suggestion(reg: Registry) -> None:
    def fn(state: Any) -> None:
        return None

    with pytest.raises(RegistryError) as caught:
        hook("after_thread_create", id="x")(fn)

    assert caught.value.message.startswith(
        f"Unknown hook 'after_thread_create' at {HERE}.{fn.__qualname__}; "
        "did you mean 'after_thread_created'? known hooks: after_thread_created, "
    )
    assert reg.hooks == {}


def test_hook_ids_must_be_snake_case_and_unique(reg: Registry) -> None:
    def one(state: Any) -> None:
        return None

    def two(state: Any) -> None:
        return None

    with pytest.raises(RegistryError, match=r"Hook id 'Audit' at .* must be snake_case"):
        hook("after_thread_created", id="Audit")(one)
    hook("after_thread_created", id="audit")(one)
    with pytest.raises(RegistryError) as caught:
        hook("tool_call_done", id="audit")(two)

    assert caught.value.message == (
        f"Hook id 'audit' defined at {HERE}.{two.__qualname__} is already registered by "
        f"{HERE}.{one.__qualname__}"
    )


def test_hook_names_are_exactly_the_spec_table_and_the_compaction_hooks() -> None:
    # The spec's table, and the two hooks around context compaction (docs/compaction.md).
    assert {str(name) for name in HookName} - {"before_compaction", "after_compaction"} == {
        "after_thread_created",
        "after_subagent_created",
        "after_system_message",
        "filter_messages",
        "prefilter_llm_history",
        "before_create_message",
        "after_create_message",
        "before_update_message",
        "after_update_message",
        "before_store_tool_result",
        "after_tool_call_success",
        "after_tool_call_failure",
        "tool_call_started",
        "tool_call_done",
    }
    assert {"before_compaction", "after_compaction"} <= {str(name) for name in HookName}


def test_effect_records_an_entry_with_or_without_args(reg: Registry) -> None:
    class Reminder(BaseModel):
        note: str

    def remind(state: Any, args: Reminder) -> None:
        return None

    def ping(state: Any) -> None:
        return None

    assert effect(description="Remind.", args=Reminder)(remind) is remind
    effect(description="Ping.", name="ping_owner")(ping)

    assert reg.effects["remind"].args_schema == Reminder.model_json_schema()
    assert reg.effects["remind"].parse_args({"note": "hi"}) == Reminder(note="hi")
    assert reg.effects["ping_owner"].args_schema is None
    assert reg.effects["ping_owner"].parse_args(None) == {}
    assert reg.effect_names() == ["ping_owner", "remind"]
    with pytest.raises(ArgumentsInvalid, match=r"\[note\] is a required property"):
        reg.effects["remind"].parse_args({})


def test_effect_names_must_be_snake_case_and_unique(reg: Registry) -> None:
    def one(state: Any) -> None:
        return None

    def two(state: Any) -> None:
        return None

    with pytest.raises(RegistryError, match="Effect name 'Send-Later' at"):
        effect(description="x", name="Send-Later")(one)
    effect(description="x", name="send_later")(one)
    with pytest.raises(RegistryError) as caught:
        effect(description="x", name="send_later")(two)

    assert caught.value.message == (
        f"Effect 'send_later' defined at {HERE}.{two.__qualname__} is already registered by "
        f"{HERE}.{one.__qualname__}"
    )


def test_thread_endpoint_records_a_normalised_route_and_methods(reg: Registry) -> None:
    def report(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    def upload(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    assert thread_endpoint("/reports/[id]/")(report) is report
    thread_endpoint("files/index", methods=["post", "Put"], public=True)(upload)

    first, second = reg.endpoints
    assert (first.route, first.methods, first.public, first.function) == (
        "reports/[id]",
        frozenset({"GET"}),
        False,
        report,
    )
    assert (second.route, second.methods, second.public) == (
        "files",
        frozenset({"POST", "PUT"}),
        True,
    )


def test_a_method_suffix_on_the_route_sets_the_method(reg: Registry) -> None:
    def create(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    thread_endpoint("reports.POST")(create)

    (entry,) = reg.endpoints
    assert (entry.route, entry.methods) == ("reports", frozenset({"POST"}))
    with pytest.raises(RegistryError, match=r"the route's \.post suffix contradicts"):
        thread_endpoint("other.post", methods=["GET"])(create)


@pytest.mark.parametrize(
    ("route", "reason"),
    [
        ("files/[*]/raw", "the catch-all [*] must be the last segment"),
        ("a/[x]/b/[x]", "parameter [x] appears twice"),
        ("a b", "segment 'a b' is neither [name], [*] nor plain text"),
        ("a/[x-y]", "segment '[x-y]' is neither [name], [*] nor plain text"),
        ("a//b", "segment '' is neither [name], [*] nor plain text"),
        ("../secrets", "segment '..' is neither [name], [*] nor plain text"),
    ],
)
def test_malformed_routes_are_refused(reg: Registry, route: str, reason: str) -> None:
    def fn(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    with pytest.raises(RegistryError) as caught:
        thread_endpoint(route)(fn)

    assert caught.value.message == f"Endpoint route {route!r} at {HERE}.{fn.__qualname__}: {reason}"


@pytest.mark.parametrize("methods", [["FETCH"], [], ["GET", "OPTIONS"]])
def test_unknown_or_missing_methods_are_refused(reg: Registry, methods: list[str]) -> None:
    def fn(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    with pytest.raises(RegistryError, match="allowed: DELETE, GET, PATCH, POST, PUT"):
        thread_endpoint("x", methods=methods)(fn)


def test_methods_given_as_a_bare_string_are_refused(reg: Registry) -> None:
    def fn(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    with pytest.raises(RegistryError, match=r"must be a list, e.g. \['GET'\]"):
        thread_endpoint("x", methods="GET")(fn)


def test_a_duplicate_route_shape_and_method_names_both_definitions(reg: Registry) -> None:
    def by_id(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    def by_slug(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    thread_endpoint("reports/[id]", methods=["GET", "DELETE"])(by_id)
    thread_endpoint("reports/[slug]", methods=["POST"])(by_slug)
    with pytest.raises(RegistryError) as caught:
        thread_endpoint("reports/[slug]", methods=["DELETE", "PATCH"])(by_slug)

    assert caught.value.message == (
        f"Endpoint DELETE 'reports/[slug]' defined at {HERE}.{by_slug.__qualname__} clashes "
        f"with 'reports/[id]', already registered by {HERE}.{by_id.__qualname__}"
    )
    assert [entry.route for entry in reg.endpoints] == ["reports/[id]", "reports/[slug]"]


def test_re_registering_an_endpoint_from_the_same_qualname_replaces_it(reg: Registry) -> None:
    def make() -> Any:
        def handler(request: Any, state: Any, params: dict[str, str]) -> None:
            return None

        return thread_endpoint("reports/[id]")(handler)

    make()
    latest = make()

    (entry,) = reg.endpoints
    assert entry.function is latest


def test_a_variable_that_is_not_a_variable_definition_is_refused(reg: Registry) -> None:
    def fn(state: Any) -> None:
        return None

    with pytest.raises(RegistryError) as caught:
        tool(description="x", variables=["WEATHER_KEY"])(fn)  # type: ignore[list-item]

    assert caught.value.message == (
        f"variables[0] of {HERE}.{fn.__qualname__} must be a VariableDefinition"
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"name": "api key"}, "name"), ({"name": "K", "type": "password"}, "type")],
)
def test_malformed_variables_are_refused_when_made(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        VariableDefinition(**fields)

    assert caught.value.errors()[0]["loc"] == (field,)


def test_a_variable_declared_twice_is_refused(reg: Registry) -> None:
    key = VariableDefinition(name="K", type="text", required=False, description="")

    def fn(state: Any) -> None:
        return None

    with pytest.raises(
        RegistryError, match=r"variables\[1\] of .*: variable 'K' is declared twice"
    ):
        tool(description="x", variables=[key, key])(fn)


def test_decorators_write_into_the_current_registry_only() -> None:
    with use_registry() as scoped:

        @tool(description="x")
        def scoped_only_tool(state: Any) -> None:
            return None

    assert "scoped_only_tool" in scoped.tools
    assert "scoped_only_tool" not in registry.tools


def test_into_targets_a_registry_explicitly() -> None:
    target = Registry()

    @hook("after_thread_created", into=target)
    def explicit_target_hook(state: Any) -> None:
        return None

    assert target.hook("explicit_target_hook") is not None
    assert registry.hook("explicit_target_hook") is None
