"""The dashboard's DAG pages: the DAG list, a DAG, its runs, the DAG editor, their buttons.
Served under /dashboard/ in the dashboard's URL namespace (scheduler_app/dashboard/urls.py
includes `dags.dashboard.urls`), on the dashboard's base template and tenancy."""
