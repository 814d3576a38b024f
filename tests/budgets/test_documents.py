"""The one document loader: YAML without aliases, anchors or merge keys, and size caps."""

from __future__ import annotations

import datetime

import pytest

from budgets.documents import (
    DocumentError,
    document_size_check,
    stored_size_check,
    yaml_load,
    yaml_load_all,
)
from tests.yaml_bomb import YAML_BOMB

MAX = 1024 * 1024


def test_the_reviews_alias_bomb_is_refused_at_its_first_anchor():
    assert len(YAML_BOMB.encode()) == 509
    with pytest.raises(DocumentError) as refused:
        yaml_load(YAML_BOMB, max_bytes=MAX)
    assert refused.value.message.startswith("YAML anchors are not allowed (&a)")
    assert refused.value.line == 4


def test_aliases_anchors_and_merge_keys_are_each_refused():
    for text, said in (
        ("a: *nowhere\n", "aliases"),
        ("a: &x 1\nb: 2\n", "anchors"),
        ("a:\n  <<: {b: 1}\n", "merge keys"),
    ):
        with pytest.raises(DocumentError, match=said):
            yaml_load(text, max_bytes=MAX)
    with pytest.raises(DocumentError, match="aliases"):
        yaml_load_all("a: 1\n---\nb: *a\n", max_bytes=MAX)


def test_plain_yaml_and_json_load_as_before():
    assert yaml_load("dag: d\nat: 2030-01-01\ntasks: [{id: a}]\n", max_bytes=MAX) == {
        "dag": "d",
        "at": datetime.date(2030, 1, 1),
        "tasks": [{"id": "a"}],
    }
    assert yaml_load('{"dag": "d", "tasks": []}', max_bytes=MAX) == {"dag": "d", "tasks": []}
    assert yaml_load_all("a: 1\n---\n---\nb: 2\n", max_bytes=MAX) == [{"a": 1}, {"b": 2}]
    with pytest.raises(DocumentError, match="not valid YAML or JSON") as refused:
        yaml_load("a: [\n", max_bytes=MAX)
    assert refused.value.line == 2
    with pytest.raises(DocumentError):  # still a safe loader: no Python tags
        yaml_load("a: !!python/object/apply:os.system [true]\n", max_bytes=MAX)


def test_sizes_are_capped_before_parsing_and_as_stored_json():
    with pytest.raises(DocumentError, match="2000 bytes; at most 1000"):
        yaml_load("a" * 2000, max_bytes=1000)
    document_size_check("é" * 500, max_bytes=1000)
    with pytest.raises(DocumentError):
        document_size_check("é" * 501, max_bytes=1000)
    assert stored_size_check({"a": "b"}, max_bytes=100) == len('{"a":"b"}')
    with pytest.raises(DocumentError, match="as stored JSON"):
        stored_size_check({"a": "x" * 200}, max_bytes=100)
