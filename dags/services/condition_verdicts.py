"""Conditions decided outside any transaction, under the expression budget.

A condition used to be evaluated inside the transaction that finished its upstream node, with
the run row locked: a JSONPath query that took 10 s (`..*` five times over 288 bytes) held the
finishing worker, its database transaction and the run's lock for those 10 s, and another
tenant's no-op run waited 54.8 s behind it. Now the engine only marks a ready node with a
condition as undecided in that transaction (`readiness.nodes_ready`), and after commit the
condition is evaluated here, reading the upstream results with no lock held and spending at
most the expression budget (nodes visited, CPU time; `budgets.limits`). Then a short
transaction applies the verdicts (`readiness.conditions_decide`).

A verdict is True (run it), False (skip it) or a string: the condition went past its budget
and the node fails with that message, which names the budget.
"""

from __future__ import annotations

from collections.abc import Iterable

from budgets.limits import BudgetExceeded
from dags.conditions import condition_holds
from dags.engine.dispatch import upstream_view
from dags.graph import Graph
from dags.models import DagRun
from scheduler_app.limits import expression_budget

Verdict = bool | str


def condition_verdicts(*, run: DagRun, graph: Graph, node_ids: Iterable[str]) -> dict[str, Verdict]:
    """Each node's verdict. Reads only (its upstream have all ended: their results no longer
    change), so it may run with no transaction open."""
    budget = expression_budget()
    verdicts: dict[str, Verdict] = {}
    for node_id in node_ids:
        condition = graph.nodes[node_id].get("condition")
        if condition is None:
            verdicts[node_id] = True
            continue
        results, statuses = upstream_view(run, graph.ancestors(node_id))
        try:
            verdicts[node_id] = condition_holds(
                condition, results=results, statuses=statuses, budget=budget
            )
        except BudgetExceeded as error:
            budget_name = error.budget.replace("_", " ")
            verdicts[node_id] = f"condition over its {budget_name} budget: {error.message}"
    return verdicts
