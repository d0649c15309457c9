from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agents.registry import (
    EndpointEntry,
    EndpointMethodNotAllowed,
    Registry,
    Segment,
    SegmentKind,
    parse_route,
    thread_endpoint,
)


def _handler(request: Any, state: Any, params: dict[str, str]) -> None:
    return None


def _registry(*routes: str | tuple[str, list[str]]) -> Registry:
    """A registry serving ``routes`` (``"path"`` for GET or ``("path", methods)``)."""
    target = Registry()
    for route in routes:
        path, methods = (route, ["GET"]) if isinstance(route, str) else route
        thread_endpoint(path, methods=methods, into=target)(_handler)
    return target


def _resolve(target: Registry, path: str, method: str = "GET") -> tuple[str, dict[str, str]] | None:
    match = target.match_endpoint(method, path)
    return None if match is None else (match.entry.route, match.params)


def test_parse_route_normalises_and_classifies_segments() -> None:
    assert parse_route("/reports/[id]/files/[*]") == (
        "reports/[id]/files/[*]",
        (
            Segment(SegmentKind.STATIC, "reports"),
            Segment(SegmentKind.DYNAMIC, "id"),
            Segment(SegmentKind.STATIC, "files"),
            Segment(SegmentKind.CATCH_ALL, "*"),
        ),
        None,
    )
    assert parse_route("") == ("", (), None)
    assert parse_route("index") == ("", (), None)
    assert parse_route("index.Delete") == ("", (), "DELETE")
    assert parse_route("reports/index.post") == (
        "reports",
        (Segment(SegmentKind.STATIC, "reports"),),
        "POST",
    )
    assert parse_route("summary.csv") == (
        "summary.csv",
        (Segment(SegmentKind.STATIC, "summary.csv"),),
        None,
    )


def test_an_endpoint_entry_normalises_and_parses_its_route() -> None:
    entry = EndpointEntry("/reports/[id]/", frozenset({"GET"}), False, _handler, __name__)

    assert entry.route == "reports/[id]"
    assert entry.match(["reports", "7"]) == {"id": "7"}
    assert entry.precedence == (SegmentKind.STATIC, SegmentKind.DYNAMIC)
    with pytest.raises(ValueError, match=r"the catch-all \[\*\] must be the last segment"):
        EndpointEntry("[*]/x", frozenset({"GET"}), False, _handler, __name__)


def test_a_static_segment_beats_a_dynamic_one() -> None:
    target = _registry("reports/[id]", "reports/summary")

    assert _resolve(target, "reports/summary") == ("reports/summary", {})
    assert _resolve(target, "reports/42") == ("reports/[id]", {"id": "42"})


def test_a_dynamic_segment_beats_a_catch_all() -> None:
    target = _registry("files/[*]", "files/[name]")

    assert _resolve(target, "files/a.txt") == ("files/[name]", {"name": "a.txt"})
    assert _resolve(target, "files/docs/a.txt") == ("files/[*]", {"*": "docs/a.txt"})


def test_precedence_is_decided_at_the_first_differing_segment() -> None:
    target = _registry("[section]/b", "a/[*]", "[section]/[item]")

    assert _resolve(target, "a/b") == ("a/[*]", {"*": "b"})
    assert _resolve(target, "z/b") == ("[section]/b", {"section": "z"})
    assert _resolve(target, "z/y") == ("[section]/[item]", {"section": "z", "item": "y"})


def test_the_catch_all_captures_the_rest_with_slashes_but_not_nothing() -> None:
    target = _registry("files/[*]")

    assert _resolve(target, "/files/a/b//c.txt/") == ("files/[*]", {"*": "a/b//c.txt"})
    assert _resolve(target, "files") is None
    assert _resolve(target, "files/") is None


def test_a_dynamic_segment_does_not_match_an_empty_segment() -> None:
    target = _registry("a/[x]/b")

    assert _resolve(target, "a//b") is None
    assert _resolve(target, "a/1/b") == ("a/[x]/b", {"x": "1"})


def test_the_index_route_serves_the_thread_root() -> None:
    target = _registry("index", "reports/index")

    assert _resolve(target, "") == ("", {})
    assert _resolve(target, "/") == ("", {})
    assert _resolve(target, "reports") == ("reports", {})
    assert _resolve(target, "reports/index") is None


def test_an_unknown_path_is_none() -> None:
    target = _registry("reports/[id]")

    assert _resolve(target, "reports") is None
    assert _resolve(target, "reports/1/2") is None
    assert _resolve(target, "other/1") is None


def test_methods_are_matched_case_insensitively() -> None:
    target = _registry(("reports", ["post"]))

    assert _resolve(target, "reports", "post") == ("reports", {})
    assert _resolve(target, "reports", "POST") == ("reports", {})


def test_a_path_served_for_other_methods_raises_method_not_allowed() -> None:
    target = _registry(("reports/[id]", ["GET", "DELETE"]), ("reports/[*]", ["PUT"]))

    with pytest.raises(EndpointMethodNotAllowed) as caught:
        target.match_endpoint("POST", "reports/1")

    assert caught.value.allowed == frozenset({"DELETE", "GET", "PUT"})
    assert caught.value.status == 405
    assert caught.value.code == "method_not_allowed"
    assert caught.value.message == (
        "POST is not allowed on endpoint 'reports/1'; allowed: DELETE, GET, PUT"
    )


def test_a_route_that_lacks_the_method_yields_to_a_less_specific_route_that_has_it() -> None:
    target = _registry(("reports/summary", ["POST"]), "reports/[id]")

    assert _resolve(target, "reports/summary", "GET") == ("reports/[id]", {"id": "summary"})
    assert _resolve(target, "reports/summary", "POST") == ("reports/summary", {})


def test_one_route_shape_may_have_different_functions_per_method() -> None:
    def read(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    def remove(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    target = Registry()
    thread_endpoint("notes/[id]", into=target)(read)
    thread_endpoint("notes/[note].delete", into=target)(remove)

    get = target.match_endpoint("GET", "notes/7")
    delete = target.match_endpoint("DELETE", "notes/7")
    assert get is not None
    assert get.entry.function is read
    assert get.params == {"id": "7"}
    assert delete is not None
    assert delete.entry.function is remove
    assert delete.params == {"note": "7"}


# --- properties ----------------------------------------------------------------------------------

PARTS = st.sampled_from(["a", "b", "c"])
PATHS = st.lists(PARTS, max_size=5).map("/".join)


@st.composite
def routes(draw: st.DrawFn) -> str:
    """Routes over a small alphabet so that they overlap often."""
    kinds = draw(st.lists(st.sampled_from(["a", "b", "dynamic"]), max_size=3))
    segments = [f"[p{i}]" if kind == "dynamic" else kind for i, kind in enumerate(kinds)]
    if draw(st.booleans()):
        segments.append("[*]")
    return "/".join(segments)


ROUTE_SETS = st.lists(routes(), unique=True, max_size=8)


def _resolve_all(route_list: Iterable[str], path: str) -> tuple[str, dict[str, str]] | None:
    return _resolve(_registry(*route_list), path)


@settings(database=None)
@given(
    route_list=ROUTE_SETS, static=st.lists(PARTS, min_size=1, max_size=4).map("/".join), path=PATHS
)
def test_adding_a_static_route_changes_only_the_resolution_of_its_own_path(
    route_list: list[str], static: str, path: str
) -> None:
    assume(static not in route_list)

    before = _resolve_all(route_list, path)
    after = _resolve_all([*route_list, static], path)

    if path == static:
        assert after == (static, {})
    else:
        assert after == before


@settings(database=None)
@given(route_list=ROUTE_SETS, path=PATHS)
def test_a_static_route_wins_over_every_dynamic_route_for_its_exact_path(
    route_list: list[str], path: str
) -> None:
    assume(path not in route_list)

    assert _resolve_all([*route_list, path], path) == (path, {})


@settings(database=None)
@given(route_list=ROUTE_SETS, path=PATHS, seed=st.randoms())
def test_resolution_does_not_depend_on_registration_order(
    route_list: list[str], path: str, seed: random.Random
) -> None:
    shuffled = list(route_list)
    seed.shuffle(shuffled)

    assert _resolve_all(shuffled, path) == _resolve_all(route_list, path)


@settings(database=None)
@given(route_list=ROUTE_SETS, path=PATHS)
def test_the_winning_route_with_its_params_spells_the_path(
    route_list: list[str], path: str
) -> None:
    resolved = _resolve_all(route_list, path)
    assume(resolved is not None)
    assert resolved is not None

    route, params = resolved
    rebuilt = "/".join(
        params["*"]
        if part == "[*]"
        else params.get(part[1:-1], part)
        if part.startswith("[")
        else part
        for part in route.split("/")
        if part
    )
    assert rebuilt == path


@settings(database=None)
@given(route_list=ROUTE_SETS, path=PATHS)
def test_no_matching_route_is_more_specific_than_the_winner(
    route_list: list[str], path: str
) -> None:
    target = _registry(*route_list)
    match = target.match_endpoint("GET", path)
    assume(match is not None)
    assert match is not None

    rivals = [entry for entry in target.endpoints if entry.match(path.split("/") if path else [])]
    assert all(match.entry.precedence <= rival.precedence for rival in rivals)
