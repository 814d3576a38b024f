"""The execution page's live log tail, for the signed-in dashboard session.

`log-events` is the same Server-Sent Events stream the API serves (api.
log_events: the worker's live Redis stream while the run goes, an `end` event with the final
status when it finishes). `log` answers the stored log's tail as plain text: the page swaps
it in when the stream ends, so what stays on screen is the persisted (masked, capped) record.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET

from api.log_events import log_event_stream_response
from dashboard.tenancy import dashboard_membership
from scheduler_app import selectors
from scheduler_app.errors import NotFound
from scheduler_app.models import TaskExecution, Tenant
from scheduler_app.services.log_followers import TooManyLogStreams

TAIL_LINES = 200


def _execution(request: HttpRequest, execution_id: str) -> tuple[Tenant, TaskExecution]:
    tenant = dashboard_membership(request).tenant
    try:
        return tenant, selectors.execution_get(tenant=tenant, execution_id=execution_id)
    except NotFound as error:
        raise Http404(str(error)) from error


def stored_log_tail(*, tenant: Tenant, execution: TaskExecution) -> str:
    log = selectors.execution_log_get(tenant=tenant, execution=execution)
    return "\n".join((log.text if log else "").splitlines()[-TAIL_LINES:])


@login_required
@require_GET
def execution_log_events(
    request: HttpRequest, execution_id: str
) -> StreamingHttpResponse | HttpResponse:
    _tenant, execution = _execution(request, execution_id)
    try:
        return log_event_stream_response(
            execution=execution, last_event_id=request.headers.get("Last-Event-ID")
        )
    except TooManyLogStreams as error:
        return HttpResponse(error.message, status=429, content_type="text/plain; charset=utf-8")


@login_required
@require_GET
def execution_log_text(request: HttpRequest, execution_id: str) -> HttpResponse:
    """The stored log's tail (what the page shows when a run ends); `?full=1` all of it (as
    stored: masked and capped), `&download=1` as a file."""
    tenant, execution = _execution(request, execution_id)
    if request.GET.get("full"):
        log = selectors.execution_log_get(tenant=tenant, execution=execution)
        text = log.text if log else ""
    else:
        text = stored_log_tail(tenant=tenant, execution=execution)
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-store"
    if request.GET.get("download"):
        response["Content-Disposition"] = f'attachment; filename="execution-{execution.id}.log"'
    return response
