"""The DAG routes of the dashboard, included by dashboard/urls.py into the
`dashboard` namespace (names such as `dashboard:dag-run` are unchanged)."""

from django.urls import path

from dashboard import backfill_dialog, trigger_pages
from dashboard.dags import approval_pages, dag_actions, dag_edit, dag_pages, node_actions

urlpatterns = [
    path("dags", dag_pages.dag_list, name="dags"),
    # Before the DAG routes below, which would take "new" for an id and "edit" for an action.
    path("dags/new", dag_edit.dag_new, name="dag-new"),
    path("dags/<str:dag_id>/edit", dag_edit.dag_edit, name="dag-edit"),
    path("dags/<str:dag_id>", dag_pages.dag_detail, name="dag"),
    path(
        "dags/<str:dag_id>/trigger/parameters",
        trigger_pages.dag_trigger_page,
        name="dag-trigger-parameters",
    ),
    # Before the action route, which would take "backfill" for an action.
    path("dags/<str:dag_id>/backfill", backfill_dialog.dag_backfill_new, name="dag-backfill-new"),
    path("dags/<str:dag_id>/<str:action>", dag_actions.dag_action, name="dag-action"),
    path("dags/<str:dag_id>/runs/<str:run_id>", dag_pages.dag_run_detail, name="dag-run"),
    path(
        "dags/<str:dag_id>/runs/<str:run_id>/<str:action>",
        dag_actions.dag_run_action,
        name="dag-run-action",
    ),
    path(
        "dags/<str:dag_id>/runs/<str:run_id>/nodes/<str:node_id>/<str:action>",
        approval_pages.dag_run_node_action,
        name="dag-run-node-action",
    ),
    path(
        "dags/<str:dag_id>/runs/<str:run_id>/operate/<str:node_id>/<str:action>",
        node_actions.dag_run_node_operate,
        name="dag-run-node-operate",
    ),
    path("approvals/<str:token>", approval_pages.approval_link, name="approval-link"),
]
