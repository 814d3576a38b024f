"""The REST client `schedctl` and SDK users share: JWT or API-key auth, refresh, errors.

Only `/api/v1/` is spoken. A JWT is refreshed shortly before it expires (its `exp` claim)
and once more on a 401, and each refresh's new refresh token (the server may rotate them)
is stored at once, so the next process starts from a valid one.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import requests

from scheduler_sdk.credentials import Credentials, CredentialStore
from scheduler_sdk.errors import (
    ApiError,
    EndpointMissing,
    NotFound,
    NotLoggedIn,
    SchedulerError,
    Unauthorized,
)
from scheduler_sdk.models import (
    DagInfo,
    DagRun,
    Execution,
    LogEnd,
    LogLine,
    TaskInfo,
    Triggered,
)
from scheduler_sdk.plan import plan_apply, plan_execute
from scheduler_sdk.sse import server_sent_events

API = "/api/v1/"
# Refresh an access token this long before its `exp`, so a request never races its expiry.
REFRESH_AHEAD_SECONDS = 30
PAGE_SIZE = 500
USER_AGENT = "schedctl/0.1"


def _noted(note: str) -> dict[str, str] | None:  # a cancel's or a delete's reason (audited)
    return {"note": note} if note else None


def _token_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT, read without verifying (the server verifies; the client only
    decides when to refresh)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return float(claims["exp"])
    except (IndexError, KeyError, ValueError, TypeError):
        return None


class Client:
    """One tenant's view of one server.

    `Client.login(url, username, password)` obtains a JWT pair (and stores it when given a
    store); `Client.from_environment()` uses `SCHEDCTL_API_KEY` if set, else the stored login.
    """

    def __init__(
        self,
        url: str,
        *,
        access: str = "",
        refresh: str = "",
        api_key: str = "",
        tenant: str | None = None,
        username: str = "",
        store: CredentialStore | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.access = access
        self.refresh_token = refresh
        self.api_key = api_key
        self.tenant = tenant
        self.username = username
        self.store = store
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["User-Agent"] = USER_AGENT

    # ---- construction ------------------------------------------------------------------

    @classmethod
    def login(
        cls,
        url: str,
        *,
        username: str,
        password: str,
        tenant: str | None = None,
        store: CredentialStore | None = None,
    ) -> Client:
        client = cls(url, tenant=tenant, username=username, store=store)
        tokens = client._post_unauthenticated(
            "auth/token", {"username": username, "password": password}
        )
        client.access, client.refresh_token = tokens["access"], tokens.get("refresh", "")
        # A user in several tenants must say which; check it now rather than on first use.
        client.request("GET", "tasks", params={"page_size": 1})
        client._save()
        return client

    @classmethod
    def from_environment(
        cls,
        *,
        url: str | None = None,
        tenant: str | None = None,
        store: CredentialStore | None = None,
    ) -> Client:
        store = store or CredentialStore()
        stored = store.load()
        api_key = os.environ.get("SCHEDCTL_API_KEY", "")
        url = url or os.environ.get("SCHEDCTL_URL") or (stored.url if stored else "")
        if not url:
            raise NotLoggedIn("no server: run `schedctl login --url URL` or set SCHEDCTL_URL")
        if api_key:
            return cls(url, api_key=api_key, tenant=tenant, store=None)
        if stored is None or not stored.access or stored.url.rstrip("/") != url.rstrip("/"):
            raise NotLoggedIn(f"not logged in to {url}: run `schedctl login --url {url}`")
        return cls(
            url,
            access=stored.access,
            refresh=stored.refresh,
            tenant=tenant or stored.tenant,
            username=stored.username,
            store=store,
        )

    # ---- authentication ----------------------------------------------------------------

    def _save(self) -> None:
        if self.store is not None and not self.api_key:
            self.store.save(
                Credentials(
                    url=self.url,
                    username=self.username,
                    tenant=self.tenant,
                    access=self.access,
                    refresh=self.refresh_token,
                )
            )

    def _auth_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.api_key:
            headers["Authorization"] = f"Api-Key {self.api_key}"
        elif self.access:
            headers["Authorization"] = f"Bearer {self.access}"
        if self.tenant:
            headers["X-Tenant"] = self.tenant
        return headers

    def _expiring(self) -> bool:
        if self.api_key or not self.access:
            return False
        expiry = _token_expiry(self.access)
        return expiry is not None and expiry - time.time() < REFRESH_AHEAD_SECONDS

    def refresh(self) -> None:
        """A new access token (and, when the server rotates them, a new refresh token)."""
        if not self.refresh_token:
            raise Unauthorized("the session has expired: run `schedctl login` again", status=401)
        if self.store is None:
            self._refresh_with(self.refresh_token)
            return
        with self.store.locked():
            stored = self.store.load()
            if stored is not None and stored.refresh and stored.refresh != self.refresh_token:
                # Another process refreshed meanwhile (and may have spent our refresh token).
                self.access, self.refresh_token = stored.access, stored.refresh
                if not self._expiring():
                    return
            self._refresh_with(self.refresh_token)
            self._save()

    def _refresh_with(self, refresh_token: str) -> None:
        try:
            tokens = self._post_unauthenticated("auth/token/refresh", {"refresh": refresh_token})
        except Unauthorized as error:
            raise Unauthorized(
                "the session has expired: run `schedctl login` again",
                status=401,
                code=error.code,
            ) from error
        self.access = tokens["access"]
        self.refresh_token = tokens.get("refresh") or refresh_token

    def _post_unauthenticated(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        response = self.session.post(self.url + API + path, json=body, timeout=self.timeout)
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        return response.json()

    # ---- transport ---------------------------------------------------------------------

    def _send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        if self._expiring():
            self.refresh()
        headers = {**kwargs.pop("headers", {}), **self._auth_headers()}
        response = self.session.request(
            method, self.url + API + path, headers=headers, timeout=self.timeout, **kwargs
        )
        if response.status_code == 401 and self.refresh_token and not self.api_key:
            self.refresh()
            headers.update(self._auth_headers())
            response = self.session.request(
                method, self.url + API + path, headers=headers, timeout=self.timeout, **kwargs
            )
        return response

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """The decoded JSON answer (None for 204); raises ApiError (or a subclass) on 4xx/5xx."""
        response = self._send(method, path, json=json_body, params=params)
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def _all(self, path: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every item of a page-numbered list."""
        items: list[dict[str, Any]] = []
        page = 1
        while True:
            body = self.request(
                "GET", path, params={**(params or {}), "page_size": PAGE_SIZE, "page": page}
            )
            items.extend(body["results"])
            if not body.get("next"):
                return items
            page += 1

    # ---- tasks -------------------------------------------------------------------------

    def tasks(self, **filters: Any) -> list[TaskInfo]:
        return [TaskInfo.from_api(item) for item in self._all("tasks", filters)]

    def task(self, task_id: str) -> TaskInfo:
        return TaskInfo.from_api(self.request("GET", f"tasks/{task_id}"))

    def task_by_name(self, name: str) -> TaskInfo | None:
        matches = [task for task in self.tasks(search=name) if task.name == name]
        return matches[0] if matches else None

    def task_create(self, body: Mapping[str, Any]) -> TaskInfo:
        return TaskInfo.from_api(self.request("POST", "tasks", json_body=body))

    def task_update(self, task_id: str, body: Mapping[str, Any]) -> TaskInfo:
        """PATCH: the keys given change, the others keep their values."""
        return TaskInfo.from_api(self.request("PATCH", f"tasks/{task_id}", json_body=body))

    def task_delete(self, task_id: str, note: str = "") -> None:
        self.request("DELETE", f"tasks/{task_id}", json_body=_noted(note))

    def task_trigger(self, task_id: str, parameters: Mapping[str, Any] | None = None) -> Triggered:
        body = {"parameters": dict(parameters)} if parameters else {}
        return Triggered.from_api(self.request("POST", f"tasks/{task_id}/trigger", json_body=body))

    def task_pause(self, task_id: str, note: str = "") -> TaskInfo:
        """`note`: why, kept with the pause (shown by the API, the dashboard, describe)."""
        body = {"note": note} if note else None
        return TaskInfo.from_api(self.request("POST", f"tasks/{task_id}/pause", json_body=body))

    def task_resume(self, task_id: str) -> TaskInfo:
        return TaskInfo.from_api(self.request("POST", f"tasks/{task_id}/resume"))

    def task_executions(self, task_id: str, *, limit: int = 20) -> list[Execution]:
        body = self.request("GET", f"tasks/{task_id}/executions", params={"page_size": limit})
        return [Execution.from_api(item) for item in body["results"]]

    def task_schedule_preview(self, task_id: str, *, count: int = 5) -> dict[str, Any]:
        return self.request("GET", f"tasks/{task_id}/schedule-preview", params={"count": count})

    def task_stats(
        self, task_id: str, *, window: str = "7d", bucket: str | None = None
    ) -> dict[str, Any]:
        """Counts by status, success rate, duration and lag p50/p95/p99 over `window`
        (`24h`, `7d`), in total and per `bucket` (`hour`, `day`; default by the window)."""
        return self.request("GET", f"tasks/{task_id}/stats", params=_stats_params(window, bucket))

    # ---- DAGs --------------------------------------------------------------------------

    def dags(self) -> list[DagInfo]:
        return [DagInfo.from_api(item) for item in self._all("dags")]

    def dag(self, dag_id: str) -> DagInfo:
        return DagInfo.from_api(self.request("GET", f"dags/{dag_id}"))

    def dag_by_name(self, name: str) -> DagInfo | None:
        """With its current definition (a list entry has none)."""
        for dag in self.dags():
            if dag.name == name:
                return self.dag(dag.id)
        return None

    def dag_create(self, body: Mapping[str, Any]) -> DagInfo:
        return DagInfo.from_api(self.request("POST", "dags", json_body=body))

    def dag_update(self, dag_id: str, body: Mapping[str, Any]) -> DagInfo:
        """PUT: a new version when the definition differs (the server ignores an equal one)."""
        return DagInfo.from_api(self.request("PUT", f"dags/{dag_id}", json_body=body))

    def dag_delete(self, dag_id: str, note: str = "") -> None:
        self.request("DELETE", f"dags/{dag_id}", json_body=_noted(note))

    def dag_trigger(self, dag_id: str, parameters: Mapping[str, Any] | None = None) -> DagRun:
        body = {"parameters": dict(parameters)} if parameters else {}
        return DagRun.from_api(self.request("POST", f"dags/{dag_id}/trigger", json_body=body))

    def dag_pause(self, dag_id: str, note: str = "") -> DagInfo:
        """`note`: why, kept with the pause (as for a task)."""
        body = {"note": note} if note else None
        return DagInfo.from_api(self.request("POST", f"dags/{dag_id}/pause", json_body=body))

    def dag_resume(self, dag_id: str) -> DagInfo:
        return DagInfo.from_api(self.request("POST", f"dags/{dag_id}/resume"))

    def dag_stats(
        self, dag_id: str, *, window: str = "7d", bucket: str | None = None
    ) -> dict[str, Any]:
        """`task_stats` for a DAG's runs."""
        return self.request("GET", f"dags/{dag_id}/stats", params=_stats_params(window, bucket))

    def dag_runs(self, dag_id: str, *, limit: int = 20) -> list[DagRun]:
        body = self.request("GET", f"dags/{dag_id}/executions", params={"page_size": limit})
        return [DagRun.from_api(item) for item in body["results"]]

    def dag_run(self, dag_id: str, run_id: str) -> DagRun:
        return DagRun.from_api(self.request("GET", f"dags/{dag_id}/executions/{run_id}"))

    def dag_run_cancel(self, dag_id: str, run_id: str, note: str = "") -> DagRun:
        path = f"dags/{dag_id}/executions/{run_id}/cancel"
        return DagRun.from_api(self.request("POST", path, json_body=_noted(note)))

    # ---- backfill ----------------------------------------------------------------------

    def backfill(
        self,
        *,
        kind: str,
        object_id: str,
        start: str,
        end: str,
        max_parallel: int | None = None,
        reprocess: str | None = None,
        dry_run: bool = False,
    ) -> Any:
        """`POST tasks/{id}/backfill` or `dags/{id}/backfill` with `{"start", "end",
        "max_parallel", "reprocess", "dry_run"}`. An older server without the route raises
        EndpointMissing."""
        path = f"{'tasks' if kind == 'task' else 'dags'}/{object_id}/backfill"
        body: dict[str, Any] = {"start": start, "end": end}
        if max_parallel is not None:
            body["max_parallel"] = max_parallel
        if reprocess is not None:
            body["reprocess"] = reprocess
        if dry_run:
            body["dry_run"] = True
        try:
            return self.request("POST", path, json_body=body)
        except ApiError as error:
            # The object was found by name first, so a 404 here is the route, not the object.
            if isinstance(error, NotFound) or error.status == 405:
                raise EndpointMissing(
                    f"this server has no backfill endpoint (POST {API}{path} answered "
                    f"{error.status}); backfill needs a newer scheduler"
                ) from error
            raise

    # ---- executions --------------------------------------------------------------------

    def executions(
        self, *, status: str | None = None, task_id: str | None = None, limit: int = 50
    ) -> list[Execution]:
        params: dict[str, Any] = {"page_size": limit}
        if status:
            params["status"] = status
        if task_id:
            params["task"] = task_id
        body = self.request("GET", "executions", params=params)
        return [Execution.from_api(item) for item in body["results"]]

    def execution(self, execution_id: str) -> Execution:
        return Execution.from_api(self.request("GET", f"executions/{execution_id}"))

    def execution_rerun(
        self, execution_id: str, parameters: Mapping[str, Any] | None = None, note: str = ""
    ) -> dict[str, Any]:
        """A new run of an ended one; `parameters` replace its own (None: the same)."""
        body = {"note": note, **({"parameters": dict(parameters)} if parameters else {})}
        return self.request("POST", f"executions/{execution_id}/rerun", json_body=body)

    def execution_cancel(self, execution_id: str, note: str = "") -> dict[str, Any]:
        return self.request("POST", f"executions/{execution_id}/cancel", json_body=_noted(note))

    def logs(self, execution_id: str) -> str:
        response = self._send("GET", f"executions/{execution_id}/logs", params={"format": "text"})
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        return response.text

    def follow_logs(
        self, execution_id: str, *, reconnect_attempts: int = 5
    ) -> Iterator[LogLine | LogEnd]:
        """The run's output line by line from the Server-Sent Events stream, then a LogEnd
        with its final status. A dropped connection (or the server's follow time limit)
        resumes from the last event id, so no line is repeated or lost."""
        last_event_id: str | None = None
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if last_event_id:
                headers["Last-Event-ID"] = last_event_id
            events = 0
            try:
                response = self._send(
                    "GET", f"executions/{execution_id}/logs", headers=headers, stream=True
                )
                if response.status_code >= 400:
                    raise ApiError.from_response(response)
                if not response.headers.get("Content-Type", "").startswith("text/event-stream"):
                    response.close()
                    raise SchedulerError("the server did not answer with a live log stream")
                with response:
                    for kind, data, event_id in server_sent_events(response):
                        events += 1
                        failures = 0
                        if event_id:
                            last_event_id = event_id
                        if kind == "end":
                            yield LogEnd(status=data)
                            return
                        if kind == "message":
                            yield LogLine(text=data, event_id=event_id)
                        # "timeout": the server's follow limit; reconnect below.
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
                if failures >= reconnect_attempts:
                    raise
            if events == 0:
                # A dropped connection, or a stream that ended with nothing: back off, and
                # give up after a few in a row rather than reconnect for ever.
                failures += 1
                if failures > reconnect_attempts:
                    raise SchedulerError(f"the log stream of {execution_id} keeps ending early")
                time.sleep(min(2.0**failures, 10.0))

    # ---- dead letters and the fleet ----------------------------------------------------

    def dead_letters(self) -> list[Execution]:
        return [Execution.from_api(item) for item in self._all("admin/dlq")]

    def dead_letter_retry(self, execution_id: str) -> dict[str, Any]:
        return self.request("POST", f"admin/dlq/{execution_id}/retry")

    def dead_letter_delete(self, execution_id: str, note: str = "") -> None:  # admins
        self.request("DELETE", f"admin/dlq/{execution_id}", json_body=_noted(note))

    def dead_letters_retry_all(self, filters: Mapping[str, str] | None = None) -> dict[str, Any]:
        return self.request("POST", "admin/dlq/retry-all", params=dict(filters or {}))

    def workers(self) -> dict[str, Any]:
        return self.request("GET", "admin/workers")

    # ---- definitions as code -----------------------------------------------------------

    def plan(self, definitions: list[Any], *, prune: bool = False) -> Any:
        """What `apply` would change (see scheduler_sdk.plan)."""

        return plan_apply(self, definitions, prune=prune)

    def apply(self, definitions: list[Any], *, prune: bool = False) -> Any:
        """Create or update `definitions` (Task, Dag or loaded files), matched by name."""

        plan = self.plan(definitions, prune=prune)
        plan_execute(self, plan)
        return plan


def _stats_params(window: str, bucket: str | None) -> dict[str, str]:
    return {"window": window, **({"bucket": bucket} if bucket else {})}
