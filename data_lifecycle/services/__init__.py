"""Data-lifecycle services: partitions, archive, retention, restore, statistics refresh."""
