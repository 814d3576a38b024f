"""The design document's two JSON examples, exactly as it writes them."""

from __future__ import annotations

import copy
import json
from typing import Any

# Section "Example: Create Task Request".
CREATE_TASK_REQUEST = json.loads(
    """
{
    "name": "daily-etl-pipeline",
    "description": "Extract, transform, and load daily sales data",
    "schedule": {
        "type": "cron",
        "expression": "0 2 * * *",
        "timezone": "America/New_York"
    },
    "handler": {
        "type": "container",
        "image": "registry.internal/etl-pipeline:v2.3",
        "command": ["dotnet", "EtlPipeline.dll", "--source=sales-db"],
        "environment": {
            "DATABASE_URL": "{{secret:sales-db-url}}",
            "LOG_LEVEL": "Information"
        },
        "resource_requirements": {
            "cpu": "2.0",
            "memory": "4Gi",
            "timeout_seconds": 3600
        }
    },
    "retry_policy": {
        "max_attempts": 3,
        "backoff": "exponential_jitter",
        "base_delay_seconds": 60,
        "max_delay_seconds": 3600
    },
    "notifications": {
        "on_failure": ["slack://data-engineering", "email://oncall@company.com"],
        "on_success": [],
        "on_dlq": ["pagerduty://critical"]
    },
    "tags": ["etl", "sales", "daily"]
}
"""
)

# Section "Conditional Branching".
CONDITIONAL_BRANCHING_DAG = json.loads(
    """
{
    "dag": "document-processing",
    "tasks": [
        { "id": "classify", "handler": "DocumentClassifier" },
        { "id": "process-invoice", "handler": "InvoiceProcessor",
          "depends_on": ["classify"],
          "condition": { "field": "classify.result.type", "equals": "invoice" } },
        { "id": "process-receipt", "handler": "ReceiptProcessor",
          "depends_on": ["classify"],
          "condition": { "field": "classify.result.type", "equals": "receipt" } }
    ]
}
"""
)

INVOICE = (
    "INVOICE No. 2024-117\nBill to: ACME Corp\nPayment terms: 30 days\nTotal due: EUR 1,250.00"
)
RECEIPT = "Corner Bakery\nReceipt\n2 croissants\nTotal: EUR 4.60\nPaid by card ****1234\nThank you"


def task_request() -> dict[str, Any]:
    return copy.deepcopy(CREATE_TASK_REQUEST)


def dag_definition() -> dict[str, Any]:
    return copy.deepcopy(CONDITIONAL_BRANCHING_DAG)


# What the create-task example's notification targets need: the tenant's Slack connection
# and a PagerDuty service named `critical` (`email://` needs nothing). The README's tour
# creates the same two before it posts the example.
DOCUMENT_CHANNELS = [
    {
        "name": "slack",
        "kind": "slack",
        "webhook_url": "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX",
    },
    {"name": "critical", "kind": "pagerduty", "routing_key": "R0UT1NGK3Y0000000000000000000000"},
]


def create_document_channels(api) -> None:
    for channel in DOCUMENT_CHANNELS:
        response = api.post("/api/v1/channels", channel, format="json")
        assert response.status_code == 201, response.content
