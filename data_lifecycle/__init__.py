"""The data lifecycle of run history: monthly partitions of the executions table, archive
and retention, restore for investigation, and the per-task statistics dashboards read."""
