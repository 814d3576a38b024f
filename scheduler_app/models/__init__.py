from scheduler_app.models.access import ApiKey, AuditEntry, IdempotencyRecord, Secret
from scheduler_app.models.execution import ExecutionLog, TaskExecution
from scheduler_app.models.task_definition import TaskDefinition
from scheduler_app.models.tenant import MemberInvitation, Tenant, TenantMembership
from scheduler_app.models.usage import PayloadUsage

__all__ = [
    "ApiKey",
    "AuditEntry",
    "ExecutionLog",
    "IdempotencyRecord",
    "MemberInvitation",
    "PayloadUsage",
    "Secret",
    "TaskDefinition",
    "TaskExecution",
    "Tenant",
    "TenantMembership",
]
