"""Count the import graph of the server code: cycles, cross-app edges, function-local imports.

    .venv/bin/python -m scripts.import_graph            # the table
    .venv/bin/python -m scripts.import_graph --details  # and the edges and cycles behind it
    .venv/bin/python -m scripts.import_graph --check    # `make test`: no cycle, no package
                                                        # over 30% of the lines

Static (the `ast` of every module under the apps; migrations left out, tests are not
part of the graph). An edge is one importing module -> one imported project module, counted
once however many names or statements carry it. `from pkg import name` points at
`pkg.name` when that is a module, otherwise at `pkg`.

- *cycles*: strongly connected components of more than one module, over the imports that run
  when a module loads (module level, `if TYPE_CHECKING:` blocks left out), and over every import
  (function-local ones too: the dependency exists, only its timing differs).
- *cross-app edges*: edges whose two ends lie in different apps, per direction.
- *function-local imports*: import statements inside a function body, in the apps' code.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The server's top-level packages, top layer first (.importlinter's layers contract), the
# one list of them: tests and tools that walk the product's code import it from here.
# scheduler_sdk and schedctl are the client side.
PACKAGES = (
    "project",
    "devstack",
    "site_admin",
    "dashboard",
    "api",
    "beat",
    "workers",
    "runs",
    "alerting",
    "data_lifecycle",
    "identity",
    "dags",
    "scheduler_app",
    "schedules",
    "handler_contract",
    "budgets",
    "sandbox",
    "tracing",
)
APPS = tuple(p for p in PACKAGES if p != "project")
# Always shown (zero included), in this order; any other pair of apps is shown when it has
# edges (and alerting/data_lifecycle -> workers, which must stay zero for their services).
DIRECTIONS = (
    ("scheduler_app", "workers"),
    ("workers", "scheduler_app"),
    ("dags", "scheduler_app"),
    ("scheduler_app", "dags"),
    ("dags", "workers"),
    ("workers", "dags"),
    ("handler_contract", "scheduler_app"),
    ("handler_contract", "workers"),
    ("handler_contract", "dags"),
    ("scheduler_app", "handler_contract"),
    ("workers", "handler_contract"),
    ("dags", "handler_contract"),
    ("workers", "sandbox"),
    ("sandbox", "workers"),
)
ALWAYS_SHOWN = {*DIRECTIONS, ("alerting", "workers"), ("data_lifecycle", "workers")}
SERVICES = tuple(
    f"{app}.services" for app in APPS if app not in ("workers", "handler_contract", "sandbox")
)


@dataclass
class Graph:
    modules: dict[str, Path] = field(default_factory=dict)
    load_edges: set[tuple[str, str]] = field(default_factory=set)  # run at import time
    all_edges: set[tuple[str, str]] = field(default_factory=set)
    local_imports: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    local_project_imports: int = 0  # of those, the ones naming a project module


def discover() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        base = ROOT / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if node.level:
        parts = module.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, node.module] if node.module else parts)
    else:
        base = node.module or ""
    out = set()
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        out.add(candidate if candidate in known else base)
    return out


def _resolve(name: str, known) -> str | None:
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def build() -> Graph:
    graph = Graph(modules=discover())
    known = graph.modules
    for module, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"

        def visit(node, in_function: bool, in_type_checking: bool, module=module, pkg=is_package):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import | ast.ImportFrom):
                    if in_function:
                        graph.local_imports[module] += 1
                    resolved_any = False
                    for target in _targets(child, module, pkg, known):
                        resolved = _resolve(target, known)
                        if resolved is None or resolved == module:
                            continue
                        resolved_any = True
                        graph.all_edges.add((module, resolved))
                        if not in_function and not in_type_checking:
                            graph.load_edges.add((module, resolved))
                    if in_function and resolved_any:
                        graph.local_project_imports += 1
                    continue
                function = in_function or isinstance(
                    child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                )
                type_checking = in_type_checking or (
                    isinstance(child, ast.If) and _is_type_checking(child)
                )
                visit(child, function, type_checking)

        visit(tree, False, False)
    return graph


def strongly_connected(nodes, edges: set[tuple[str, str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module, largest first."""
    succ: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        succ[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(succ[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def app_of(module: str) -> str:
    return module.split(".", 1)[0]


def mutual_pairs(edges: set[tuple[str, str]]) -> int:
    return sum(1 for a, b in edges if a < b and (b, a) in edges)


def _directions() -> list[tuple[str, str]]:
    rest = [(a, b) for a in APPS for b in APPS if a != b and (a, b) not in DIRECTIONS]
    return [*DIRECTIONS, *rest]


def report(graph: Graph, details: bool) -> str:
    lines = [f"modules: {len(graph.modules)} (packages: {', '.join(PACKAGES)}; no migrations)"]
    lines.append("")
    lines.append("| measure | count |")
    lines.append("|---|---|")
    for label, edges in (("load-time imports", graph.load_edges), ("all imports", graph.all_edges)):
        components = strongly_connected(graph.modules, edges)
        in_cycles = sum(len(c) for c in components)
        lines.append(
            f"| cycles over {label}: components / modules in them / largest | "
            f"{len(components)} / {in_cycles} / {max((len(c) for c in components), default=0)} |"
        )
        lines.append(f"| mutual imports (A->B and B->A) over {label} | {mutual_pairs(edges)} |")
    for source, target in _directions():
        edges = [e for e in graph.all_edges if app_of(e[0]) == source and app_of(e[1]) == target]
        if "handler_contract" in (source, target) and "handler_contract" not in graph.modules:
            continue
        if (source, target) not in ALWAYS_SHOWN and not edges:
            continue
        local = [e for e in edges if e not in graph.load_edges]
        lines.append(
            f"| cross-app edges {source} -> {target} (of which only function-local) | "
            f"{len(edges)} ({len(local)}) |"
        )
    services_to_workers = [
        e for e in graph.all_edges if e[0].startswith(SERVICES) and app_of(e[1]) == "workers"
    ]
    lines.append(f"| edges services -> workers | {len(services_to_workers)} |")
    total_local = sum(graph.local_imports.values())
    per_app = defaultdict(int)
    for module, count in graph.local_imports.items():
        per_app[app_of(module)] += count
    split = ", ".join(f"{app} {count}" for app, count in sorted(per_app.items()))
    lines.append(f"| function-local import statements | {total_local} ({split}) |")
    lines.append(
        f"| function-local import statements naming a project module | "
        f"{graph.local_project_imports} |"
    )
    if details:
        lines.append("")
        for label, edges in (("load-time", graph.load_edges), ("all", graph.all_edges)):
            lines.append(f"cycles ({label} imports):")
            for component in strongly_connected(graph.modules, edges):
                lines.append(f"  {len(component)}: {' '.join(component)}")
        for source, target in _directions():
            edges = sorted(
                e for e in graph.all_edges if app_of(e[0]) == source and app_of(e[1]) == target
            )
            if edges:
                lines.append(f"edges {source} -> {target}:")
                lines.extend(f"  {a} -> {b}" for a, b in edges)
        lines.append("edges services -> workers:")
        lines.extend(f"  {a} -> {b}" for a, b in sorted(services_to_workers))
        lines.append("function-local imports per module:")
        for module, count in sorted(graph.local_imports.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {count:3d} {module}")
    return "\n".join(lines)


# No top-level package may hold more than this share of the product's lines (a catch-all
# core is what the layering undid).
MAX_PACKAGE_SHARE = 0.30


def package_lines(graph: Graph) -> dict[str, int]:
    lines: dict[str, int] = defaultdict(int)
    for module, path in graph.modules.items():
        lines[app_of(module)] += len(path.read_text().splitlines())
    return dict(lines)


def problems(graph: Graph) -> list[str]:
    """What `--check` refuses: any import cycle (over every import, function-local and
    type-checking ones too), and a package over MAX_PACKAGE_SHARE of the lines."""
    found = [
        f"import cycle: {' -> '.join(component)}"
        for component in strongly_connected(graph.modules, graph.all_edges)
    ]
    lines = package_lines(graph)
    total = sum(lines.values()) or 1
    found += [
        f"{package} holds {count / total:.1%} of the product's lines (at most "
        f"{MAX_PACKAGE_SHARE:.0%})"
        for package, count in sorted(lines.items())
        if count / total > MAX_PACKAGE_SHARE
    ]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--details", action="store_true", help="list the edges and cycles")
    parser.add_argument(
        "--check", action="store_true", help="fail on an import cycle or an oversized package"
    )
    args = parser.parse_args(argv)
    graph = build()
    if args.check:
        found = problems(graph)
        for problem in found:
            print(problem, file=sys.stderr)
        return 1 if found else 0
    print(report(graph, args.details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
