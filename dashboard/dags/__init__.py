"""The dashboard's DAG pages: the DAG list, a DAG, its runs, the DAG editor, their buttons.
Served under /dashboard/ in the dashboard's URL namespace (dashboard/urls.py
includes `dashboard.dags.urls`), on the dashboard's base template and tenancy."""
