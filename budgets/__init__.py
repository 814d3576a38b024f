"""Budgets for what a tenant supplies, in a package that belongs to no app.

Everything a tenant supplies has a budget (docs/api/limits.md): a budget is checked
when the thing is saved, so a mistake is a 400 naming its field, and enforced again when it
is used, so a definition stored before a budget existed (or under a looser one) still cannot
spend past it.

- `limits`: the expression budget (`ExpressionBudget`), its error (`BudgetExceeded`, which
  names the budget that ran out) and the meter that counts what an evaluation spends.
- `jsonpath`: RFC 9535 JSONPath under that budget (DAG conditions).
- `regex`: linear-time (RE2) `match()`/`search()` for those queries.
- `templates`: dotted paths (`classify.result.items.0`, `parameters.region`) and
  `{{ ... }}` templates over them (idempotency keys, and any later templated key).
- `documents`: YAML without aliases, anchors or merge keys, and size caps for a document
  and for the JSON stored from it (DAG and task definitions, wherever they are read).

Plain Python: imports neither Django nor any app (import-linter keeps it so), so the
client (`schedctl`, `scheduler_sdk`) reads definition files with the same loader.
`documents` needs only PyYAML, the others the server's jsonpath-rfc9535 and google-re2.
"""
