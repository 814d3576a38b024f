"""How people read a task's name. A DAG node's hidden task is stored as
`dag:<dag>/<node>@v<version>-<6 hex>` (unique per tenant, so two versions of a node never
collide), which nobody should have to decode: it reads "<dag> > <node> (v<version>)", with
the dashboard's breadcrumb arrow (U+203A) for the ">".

Pure: the admin, the dashboard and the models' `__str__` all call `task_display_name`.
"""

from __future__ import annotations

import re

# The DAG's name may hold "/"; a node id may not (dags/validation), so the last "/" splits.
_DAG_NODE_NAME = re.compile(r"^dag:(?P<dag>.+)/(?P<node>[^/]+)@v(?P<version>\d+)-[0-9a-f]{6}$")


def task_display_name(name: str) -> str:
    """ "dag:fan-out-example/merge@v1-927958" -> "fan-out-example > merge (v1)"; any other
    name (and one cut short at 255 characters) as it is."""
    match = _DAG_NODE_NAME.match(name or "")
    if match is None:
        return name
    return f"{match['dag']} › {match['node']} (v{match['version']})"
