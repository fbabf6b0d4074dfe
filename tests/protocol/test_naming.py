"""Tenant and namespace names by Pulsar's named-entity rule, and names as URL segments."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol.naming import TopicName, check_named_entity, parse_namespace, url_segment


@pytest.mark.parametrize("name", ["public", "a-b_c.d:e=f", "X9", "...", "a" * 300])
def test_valid_named_entities(name: str) -> None:
    assert check_named_entity("tenant", name) == name


@pytest.mark.parametrize("name", ["", "bad tenant!", "ünï", "a/b", "q?x", "100%", "line\n", "tab\t",
                                  ".", ".."])
def test_invalid_named_entities_say_the_kind_and_the_name(name: str) -> None:
    with pytest.raises(ValueError, match=r"Invalid tenant name") as info:
        check_named_entity("tenant", name)
    assert repr(name) in str(info.value) or name == ""
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("name", "parsed"), [("public/default", ("public", "default")),
                                              ("t/c/ns", ("t", "c/ns"))])
def test_namespaces(name: str, parsed: tuple[str, str]) -> None:
    assert parse_namespace(name) == parsed


@pytest.mark.parametrize(("name", "words"), [
    ("public", "expected <tenant>/<namespace>"), ("a/b/c/d", "expected"),
    ("persistent://", "expected"), ("public/", "empty namespace"), ("/ns", "empty tenant"),
    ("public/bad ns", "namespace 'bad ns' may only contain"), ("../ns", "tenant '..'"),
])
def test_bad_namespaces_name_the_whole_name(name: str, words: str) -> None:
    with pytest.raises(ValueError, match=r"Invalid namespace name") as info:
        parse_namespace(name)
    assert repr(name) in str(info.value) and words in str(info.value)


def test_local_names_go_into_urls_as_one_segment() -> None:
    for local in ["bad topic name!", "q?x=1", "100%", "a/b", "ünï", "#frag"]:
        segment = url_segment(local)
        assert "/" not in segment and "?" not in segment and " " not in segment
    assert TopicName.parse("public/default/q?x=1").rest_path() == "persistent/public/default/q%3Fx%3D1"
    assert TopicName.parse("bad topic name!").rest_path() == "persistent/public/default/bad%20topic%20name%21"


@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/"), min_size=1))
def test_any_local_name_survives_the_url_whole(local: str) -> None:
    """Whatever the local name, its URL segment holds no separator and decodes back to it
    (what the admin API's server does), so the topic the broker has is the one addressed."""
    name = TopicName.parse(f"persistent://public/default/{local}")
    segment = name.rest_path().split("/", 3)[3]
    assert "/" not in segment and "?" not in segment and "#" not in segment
    assert unquote(segment, errors="strict") == local


def test_a_name_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(ValueError, match="not valid UTF-8"):
        TopicName.parse("bad-\udcff")  # what argv holds for the byte 0xff
