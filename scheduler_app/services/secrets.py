"""Tenant secrets: Fernet-encrypted at rest, decrypted only by the worker that needs them.

`SECRETS_KEY` holds one or more Fernet keys (comma separated). The first encrypts; all
decrypt, which is what makes rotation possible without downtime (`manage.py rotate_secrets`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction

from budgets.limits import BudgetExceeded
from scheduler_app.choices import Trigger
from scheduler_app.errors import Conflict, ValidationFailed
from scheduler_app.models import Secret, TaskExecution, Tenant
from scheduler_app.services.audit import audit_action

SECRET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
REFERENCE = re.compile(r"\{\{\s*secret:([A-Za-z0-9][A-Za-z0-9_.-]{0,127})\s*\}\}")
MAX_VALUE_BYTES = 64 * 1024


@lru_cache(maxsize=4)
def _cipher(raw_keys: str) -> MultiFernet:
    keys = [key.strip() for key in raw_keys.split(",") if key.strip()]
    if not keys:
        # Never derived from SECRET_KEY here: only the local settings derive a default.
        raise ImproperlyConfigured("SECRETS_KEY is not set")
    return MultiFernet([Fernet(key.encode()) for key in keys])


def cipher() -> MultiFernet:
    return _cipher(settings.SECRETS_KEY)


def _validate(name: str, value: str) -> None:
    if not SECRET_NAME.match(name):
        raise ValidationFailed(
            "name must be 1-128 letters, digits, '_', '-' or '.', starting alphanumeric",
            field="name",
        )
    if len(value.encode()) > MAX_VALUE_BYTES:
        raise ValidationFailed("value is larger than 64 KiB", field="value")


def secret_create(*, tenant: Tenant, name: str, value: str, description: str = "") -> Secret:
    _validate(name, value)
    try:
        with transaction.atomic():
            secret = Secret.objects.create(
                tenant=tenant,
                name=name,
                description=description,
                ciphertext=cipher().encrypt(value.encode()).decode(),
            )
            _audit(secret, "secret.create", after={"name": name})
            return secret
    except IntegrityError as error:
        raise Conflict(f"a secret named {name!r} already exists", field="name") from error


def secret_update(*, secret: Secret, value: str | None, description: str | None) -> Secret:
    if value is not None:
        _validate(secret.name, value)
        secret.ciphertext = cipher().encrypt(value.encode()).decode()
    if description is not None:
        secret.description = description
    secret.save(update_fields=["ciphertext", "description", "updated_at"])
    # Never the value: only that it changed.
    changed = [
        name
        for name, given in (("value", value), ("description", description))
        if given is not None
    ]
    _audit(secret, "secret.update", after={"changed": changed})
    return secret


def secret_delete(*, secret: Secret) -> None:
    if Secret.objects.filter(tenant_id=secret.tenant_id, id=secret.id).delete()[0]:
        _audit(secret, "secret.delete", before={"name": secret.name})


def _audit(secret: Secret, verb: str, **change: Any) -> None:
    audit_action(
        tenant=secret.tenant, verb=verb, object_type="secret", object_id=secret.id, **change
    )


def secrets_rotate() -> int:
    """Re-encrypt every secret with the first key. Returns how many were rewritten."""
    rotated = 0
    fernet = cipher()
    for secret in Secret.platform.all().iterator(chunk_size=500):
        new = fernet.rotate(secret.ciphertext.encode()).decode()
        Secret.objects.filter(
            tenant_id=secret.tenant_id, id=secret.id, ciphertext=secret.ciphertext
        ).update(ciphertext=new)
        rotated += 1
    return rotated


# -- worker side ----------------------------------------------------------------------
def referenced_names(value: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(value, str):
        found.update(REFERENCE.findall(value))
    elif isinstance(value, dict):
        for item in value.values():
            found |= referenced_names(item)
    elif isinstance(value, list | tuple):
        for item in value:
            found |= referenced_names(item)
    return found


def secrets_resolve(*, tenant_id: Any, names: Iterable[str]) -> dict[str, str]:
    """Plaintext of the named secrets of this tenant only. Unknown names are an error."""
    wanted = set(names)
    if not wanted:
        return {}
    values: dict[str, str] = {}
    fernet = cipher()
    for secret in Secret.objects.filter(tenant_id=tenant_id, name__in=wanted):
        try:
            values[secret.name] = fernet.decrypt(secret.ciphertext.encode()).decode()
        except InvalidToken as error:
            raise ValueError(
                f"secret {secret.name!r} cannot be decrypted with SECRETS_KEY"
            ) from error
    missing = wanted - values.keys()
    if missing:
        raise KeyError(", ".join(sorted(missing)))
    return values


def substitute(value: Any, values: dict[str, str], *, max_growth: int | None = None) -> Any:
    """Replace every `{{secret:name}}` in strings nested anywhere in `value`.

    A reference is a template, under the expression budget's output limit: the text may grow
    by at most `max_growth` characters in all (a 1 MiB definition can hold 87,000 references
    to a 64 KiB secret, 5.6 GB once filled in, in the worker that runs it), else
    BudgetExceeded before the oversize text is built."""
    grown = 0

    def fill(match: re.Match[str]) -> str:
        nonlocal grown
        replacement = values[match.group(1)]
        grown += len(replacement) - len(match.group(0))
        if max_growth is not None and grown > max_growth:
            raise BudgetExceeded(
                "output",
                f"secret references would add more than {max_growth} characters "
                "(the output budget)",
            )
        return replacement

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return REFERENCE.sub(fill, item)
        if isinstance(item, dict):
            return {key: walk(child) for key, child in item.items()}
        if isinstance(item, list):
            return [walk(child) for child in item]
        return item

    return walk(value)


# -- where references are honoured ------------------------------------------------------
def secret_references_refuse(*, parameters: Any, field: str = "parameters") -> None:
    """A trigger's parameters may not reference secrets: whoever may trigger (an operator)
    could otherwise have any secret of the tenant written into a run's log or sent anywhere.
    References are honoured only in what a tenant admin authored (tasks, DAG definitions)."""
    names = referenced_names(parameters)
    if names:
        raise ValidationFailed(
            "secret references are allowed only in task and DAG definitions, not in trigger "
            f"parameters (found {', '.join(sorted(names))})",
            field=field,
        )


def run_parameters_split(
    *, task_parameters: dict[str, Any] | None, execution: TaskExecution
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(authored, supplied) parameters of a run, later winning when merged.

    `authored` (the task's own, and for a DAG node the DAG's and the node's) has its secret
    references resolved; `supplied` (a manual trigger's parameters, a fan-out shard's `item`,
    which is upstream data) reaches the handler as literal text, whatever it contains."""
    authored = dict(task_parameters or {})
    carried = dict(execution.parameters or {})
    supplied = {"item": carried.pop("item")} if "item" in carried else {}
    if not referenced_names(carried):
        authored.update(carried)  # nothing to decide: no reference either way
        return authored, supplied
    trigger = execution.trigger
    if trigger == Trigger.RETRY and execution.root_execution_id:
        # A retry carries its first attempt's parameters: their origin is that attempt's.
        trigger = (
            TaskExecution.objects.filter(
                tenant_id=execution.tenant_id, id=execution.root_execution_id
            )
            .values_list("trigger", flat=True)
            .first()
        )
    if trigger == Trigger.DAG:
        # A node's parameters are the DAG's and the node's (its admin's); a DAG run's trigger
        # parameters carry no reference (dag_trigger refuses them).
        authored.update(carried)
    else:
        supplied = {**carried, **supplied}
    return authored, supplied
