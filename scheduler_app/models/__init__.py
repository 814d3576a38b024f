from scheduler_app.models.execution import ExecutionLog, TaskExecution
from scheduler_app.models.lifecycle import RestoredExecution, StatsBucket, TaskStats
from scheduler_app.models.task_definition import TaskDefinition
from scheduler_app.models.tenant import Tenant, TenantMembership

__all__ = [
    "ExecutionLog",
    "RestoredExecution",
    "StatsBucket",
    "TaskDefinition",
    "TaskExecution",
    "TaskStats",
    "Tenant",
    "TenantMembership",
]
