"""In-app alerting and notifications: incidents (de-duplicated), rules, channels, delivery."""
