"""How the audit log names what was done: a verb `<object>.<operation>` ("task.pause"), shown
in words ("paused task"). Plain Python, no Django.

Entries written before the verbs were named carry the API route and method instead
("task-pause.post", "task-list.post"): `verb_of` reads those as the verb they stand for, so old
entries display, and filter, like new ones. The API's audit fallback names a route it has no
service entry for by the same rule (`verb_for_route`), so every entry reads as words.
"""

from __future__ import annotations

# Past tense of each operation, for the words.
PAST = {
    "create": "created",
    "update": "edited",
    "delete": "deleted",
    "pause": "paused",
    "resume": "resumed",
    "trigger": "triggered",
    "cancel": "cancelled",
    "retry": "retried",
    "retry-all": "retried every",
    "rerun": "re-ran",
    "clear": "cleared",
    "mark": "marked",
    "acknowledge": "acknowledged",
    "resolve": "resolved",
    "approve": "approved",
    "reject": "rejected",
    "skip": "skipped",
    "test": "tested",
    "revoke": "revoked",
    "accept": "accepted",
    "invite": "invited",
    "failover": "failed over",
    "backfill": "backfilled",
    "checkpoint": "checkpointed",
    "enable": "enabled",
    "disable": "disabled",
    "backup": "backed up",
    "restore": "restored",
}

# What the object types are called in words.
NOUNS = {
    "task": "task",
    "execution": "run",
    "dlq": "dead letter",
    "dead_letter": "dead letter",
    "dag": "DAG",
    "dag_run": "DAG run",
    "dag_node": "DAG node",
    "apikey": "API key",
    "api_key": "API key",
    "secret": "secret",
    "channel": "channel",
    "member": "member",
    "invitation": "invitation",
    "tenant": "tenant",
    "backfill": "backfill",
    "approval": "approval",
    "scheduler": "scheduler",
    "pool": "pool",
    "event": "event",
    "incident": "incident",
    "database": "database",
}

# The verbs the services write, for a filter's suggestions.
KNOWN_VERBS = (
    "task.create", "task.update", "task.delete", "task.pause", "task.resume", "task.trigger",
    "execution.cancel", "execution.rerun", "dlq.retry", "dlq.delete",
    "dag.create", "dag.update", "dag.delete", "dag.pause", "dag.resume", "dag.trigger",
    "dag_run.cancel", "dag_run.rerun", "dag_run.clear", "dag_node.clear", "dag_node.mark",
    "approval.approve", "approval.reject",
    "backfill.create", "backfill.cancel", "event.create",
    "channel.create", "channel.update", "channel.delete", "channel.test",
    "invitation.create", "invitation.revoke", "invitation.accept",
    "member.update", "member.delete", "apikey.create", "apikey.revoke",
    "secret.create", "secret.update", "secret.delete",
    "incident.acknowledge", "incident.resolve",
    "database.backup", "database.restore",
    "pool.create", "pool.update", "pool.delete",
)  # fmt: skip

_METHOD_OPERATION = {"post": "create", "put": "update", "patch": "update", "delete": "delete"}
_COLLECTION = {"list", ""}


# Where the route's word is not the verb the services write.
ROUTE_VERBS = {"dag_run.retry": "dag_run.rerun"}


def verb_for_route(route: str, method: str) -> str:
    verb = _route_verb(route, method)
    return ROUTE_VERBS.get(verb, verb)


def _route_verb(route: str, method: str) -> str:
    """The verb an API route and method stand for: task-list POST -> task.create, task-detail
    PUT -> task.update, task-pause POST -> task.pause, dlq-retry-all POST -> dlq.retry-all."""
    method = method.lower()
    noun, _, rest = route.partition("-")
    if rest in _COLLECTION and method == "post":
        return f"{noun}.create"
    if rest == "detail" or (rest in _COLLECTION and method != "post"):
        return f"{noun}.{_METHOD_OPERATION.get(method, method)}"
    if rest.endswith("-detail"):  # dag-run-detail DELETE -> dag_run.delete
        noun = f"{noun}_{rest.removesuffix('-detail').replace('-', '_')}"
        return f"{noun}.{_METHOD_OPERATION.get(method, method)}"
    if rest.startswith("run-"):  # dag-run-cancel -> dag_run.cancel
        return f"{noun}_run.{rest.removeprefix('run-')}"
    return f"{noun}.{rest}"


def verb_of(action: str) -> str:
    """The verb of a stored action, old spelling ("task-pause.post") or new ("task.pause")."""
    route, dot, method = action.rpartition(".")
    if dot and route and method in _METHOD_OPERATION:
        return verb_for_route(route, method)
    return action


def legacy_actions(verb: str) -> list[str]:
    """The old spellings that read as `verb` (for filtering old entries by the new verb)."""
    noun, dot, operation = verb.partition(".")
    if not dot:
        return []
    route_noun = noun.replace("_", "-")
    spelled = [f"{route_noun}-{operation}.post"]
    spelled += [
        f"{route.partition('.')[0].replace('_', '-')}-{route.partition('.')[2]}.post"
        for route, written in ROUTE_VERBS.items()
        if written == verb
    ]
    if operation == "create":
        spelled.append(f"{route_noun}-list.post")
    if operation == "update":
        spelled += [f"{route_noun}-detail.put", f"{route_noun}-detail.patch"]
    if operation == "delete":
        spelled.append(f"{route_noun}-detail.delete")
    return [old for old in spelled if verb_of(old) == verb]


# Verbs whose words do not follow "<past> <noun>".
WORDS = {
    "approval.approve": "approved a DAG node",
    "approval.reject": "rejected a DAG node",
    "invitation.accept": "joined (accepted an invitation)",
    "auth.lockout": "locked out of signing in",
    "event.create": "posted an event",
}


def verb_words(verb: str, object_type: str = "") -> str:
    """ "task.pause" -> "paused task"; an operation without a past tense reads as it is
    ("quota.exceeded" -> "quota exceeded")."""
    if verb in WORDS:
        return WORDS[verb]
    noun, dot, operation = verb.partition(".")
    if not dot:
        return verb.replace("-", " ").replace("_", " ")
    name = NOUNS.get(noun) or NOUNS.get(object_type) or noun.replace("_", " ")
    past = PAST.get(operation)
    if past is None:
        return f"{name} {operation.replace('-', ' ').replace('_', ' ')}"
    return f"{past} {name}"
