"""Input cost at the API's door: JSON nested deeper than API_MAX_JSON_DEPTH is a 400 naming
the problem, never a 500 (the decoder recursed once per level), and nothing is stored."""

from __future__ import annotations

import pytest

from scheduler_app.models import TaskDefinition

pytestmark = pytest.mark.django_db


def _task_with_parameters(raw_parameters: str) -> str:
    return (
        '{"name": "deep", "schedule": {"type": "manual"}, '
        '"handler": {"type": "python", "callable": "noop"}, "parameters": ' + raw_parameters + "}"
    )


@pytest.mark.parametrize("depth", [65, 5_000, 150_000])
def test_deeply_nested_json_is_a_400(api, depth):
    body = _task_with_parameters('{"a":' * depth + "1" + "}" * depth)
    response = api.post("/api/v1/tasks", body, content_type="application/json")
    assert response.status_code == 400
    assert "nested deeper than 64 levels" in response.json()["message"]
    assert not TaskDefinition.platform.filter(name="deep").exists()


def test_nesting_within_the_limit_is_accepted(api):
    depth = 60  # plus the body and "parameters" themselves: 62 levels
    body = _task_with_parameters('{"a":' * depth + "1" + "}" * depth)
    response = api.post("/api/v1/tasks", body, content_type="application/json")
    assert response.status_code == 201, response.content


def test_the_depth_check_counts_lists_and_objects():
    from api.parsers import json_depth_exceeds

    assert not json_depth_exceeds([[[[1]]]], 4)
    assert json_depth_exceeds([[[[1]]]], 3)
    assert json_depth_exceeds({"a": [{"b": [1]}]}, 3)
    assert not json_depth_exceeds({"a": ["x"] * 100_000, "b": {"c": 1}}, 2)
    assert not json_depth_exceeds("scalar", 0)
