"""`scripts.import_graph --check`, which `make test` runs: it finds a cycle however the
imports that make it are written, and the product has none."""

from __future__ import annotations

from pathlib import Path

from scripts import import_graph
from scripts.import_graph import Graph, build, problems


def _graph(tmp_path: Path, sources: dict[str, str]) -> Graph:
    modules = {}
    for name, text in sources.items():
        path = tmp_path / f"{name.replace('.', '_')}.py"
        path.write_text(text)
        modules[name] = path
    graph = Graph(modules=modules)
    for name in sources:  # what build() records: every import, function-local ones too
        for other in sources:
            if other != name and f"import {other.rsplit('.', 1)[-1]}" in sources[name]:
                graph.all_edges.add((name, other))
    return graph


def test_a_cycle_through_a_function_local_import_is_a_problem(tmp_path, monkeypatch):
    monkeypatch.setattr(import_graph, "MAX_PACKAGE_SHARE", 1.0)  # one package here
    graph = _graph(
        tmp_path,
        {
            "app.a": "from app import b\n",
            "app.b": "def f():\n    from app import a\n",
            "app.c": "x = 1\n",
        },
    )
    assert problems(graph) == ["import cycle: app.a -> app.b"]


def test_a_package_over_the_share_is_a_problem(tmp_path, monkeypatch):
    graph = _graph(tmp_path, {"big.a": "x = 1\n" * 80, "small.a": "x = 1\n" * 20})
    monkeypatch.setattr(import_graph, "MAX_PACKAGE_SHARE", 0.5)
    assert problems(graph) == ["big holds 80.0% of the product's lines (at most 50%)"]


def test_the_product_has_no_cycle_and_no_oversized_package():
    assert problems(build()) == []
