from scheduler_app.models.access import ApiKey, AuditEntry, IdempotencyRecord, Secret
from scheduler_app.models.alerting import AlertIncident, ChannelKind, NotificationChannel
from scheduler_app.models.execution import ExecutionLog, TaskExecution
from scheduler_app.models.lifecycle import RestoredExecution, StatsBucket, TaskStats
from scheduler_app.models.task_definition import TaskDefinition
from scheduler_app.models.tenant import MemberInvitation, Tenant, TenantMembership

__all__ = [
    "AlertIncident",
    "ApiKey",
    "AuditEntry",
    "ChannelKind",
    "ExecutionLog",
    "IdempotencyRecord",
    "MemberInvitation",
    "NotificationChannel",
    "RestoredExecution",
    "Secret",
    "StatsBucket",
    "TaskDefinition",
    "TaskExecution",
    "TaskStats",
    "Tenant",
    "TenantMembership",
]
