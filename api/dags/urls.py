from django.urls import path

from api import views_stats
from api.dags import approval_views, backfill_views, event_views, node_views, views

# An ended run's node: cleared or marked, under its DAG or by the run's id alone.
NODE_ACTIONS = {"clear": node_views.NodeClearView, "mark": node_views.NodeMarkView}

urlpatterns = [
    path("dags", views.DagListView.as_view(), name="dag-list"),
    path("dags/<str:dag_id>", views.DagDetailView.as_view(), name="dag-detail"),
    path("dags/<str:dag_id>/trigger", views.DagTriggerView.as_view(), name="dag-trigger"),
    path("dags/<str:dag_id>/pause", views.DagPauseView.as_view(), name="dag-pause"),
    path("dags/<str:dag_id>/resume", views.DagResumeView.as_view(), name="dag-resume"),
    path("dags/<str:dag_id>/stats", views_stats.DagStatsView.as_view(), name="dag-stats"),
    path("dags/<str:dag_id>/executions", views.DagRunListView.as_view(), name="dag-runs"),
    path(
        "dags/<str:dag_id>/executions/<str:run_id>",
        views.DagRunDetailView.as_view(),
        name="dag-run-detail",
    ),
    path(
        "dags/<str:dag_id>/executions/<str:run_id>/cancel",
        views.DagRunCancelView.as_view(),
        name="dag-run-cancel",
    ),
    path(
        "dags/<str:dag_id>/executions/<str:run_id>/retry",
        views.DagRunRetryView.as_view(),
        name="dag-run-retry",
    ),
    *[
        path(
            f"dags/<str:dag_id>/executions/<str:run_id>/nodes/<str:node_id>/{verdict}",
            approval_views.NodeDecideView.as_view(verdict=verdict),
            name=f"dag-run-node-{verdict}",
        )
        for verdict in ("approve", "reject")
    ],
    *[
        path(
            f"dags/<str:dag_id>/executions/<str:run_id>/nodes/<str:node_id>/{action}",
            view.as_view(),
            name=f"dag-run-node-{action}",
        )
        for action, view in NODE_ACTIONS.items()
    ],
    *[
        path(
            f"dag-runs/<str:run_id>/nodes/<str:node_id>/{action}",
            view.as_view(),
            name=f"dag-run-node-{action}-by-id",
        )
        for action, view in NODE_ACTIONS.items()
    ],
    path("approvals", approval_views.ApprovalListView.as_view(), name="approval-list"),
    path(
        "approvals/<str:approval_id>",
        approval_views.ApprovalDetailView.as_view(),
        name="approval-detail",
    ),
    *[
        path(
            f"approvals/<str:approval_id>/{verdict}",
            approval_views.ApprovalDecideView.as_view(verdict=verdict),
            name=f"approval-{verdict}",
        )
        for verdict in ("approve", "reject")
    ],
    path(
        "tasks/<str:task_id>/backfill",
        backfill_views.TaskBackfillView.as_view(),
        name="task-backfill",
    ),
    path(
        "dags/<str:dag_id>/backfill", backfill_views.DagBackfillView.as_view(), name="dag-backfill"
    ),
    path("backfills", backfill_views.BackfillListView.as_view(), name="backfill-list"),
    path("events", event_views.EventListView.as_view(), name="event-list"),
    path(
        "backfills/<str:backfill_id>",
        backfill_views.BackfillDetailView.as_view(),
        name="backfill-detail",
    ),
    path(
        "backfills/<str:backfill_id>/cancel",
        backfill_views.BackfillCancelView.as_view(),
        name="backfill-cancel",
    ),
]
