from scheduler_app.models.access import ApiKey, AuditEntry, IdempotencyRecord, Secret
from scheduler_app.models.checkpoint import RunCheckpoint
from scheduler_app.models.execution import ExecutionLog, TaskExecution
from scheduler_app.models.flow import FlowRateStart, Pool
from scheduler_app.models.loss import ExecutionLoss, LossOutcome
from scheduler_app.models.task_definition import TaskDefinition
from scheduler_app.models.tenant import MemberInvitation, Tenant, TenantMembership
from scheduler_app.models.usage import BudgetUsage

__all__ = [
    "ApiKey",
    "AuditEntry",
    "BudgetUsage",
    "ExecutionLog",
    "ExecutionLoss",
    "FlowRateStart",
    "IdempotencyRecord",
    "LossOutcome",
    "MemberInvitation",
    "Pool",
    "RunCheckpoint",
    "Secret",
    "TaskDefinition",
    "TaskExecution",
    "Tenant",
    "TenantMembership",
]
