#!/bin/sh
# Starts Alertmanager once the receivers' keys are real: each file named in
# $ALERTMANAGER_SECRET_FILES (space-separated; default the two alertmanager.yml reads) must
# exist, be non-empty and not be a placeholder (a value containing "placeholder", "change-me"
# or "REPLACE"): an Alertmanager that starts with a placeholder key accepts every alert and
# delivers none, and nobody is paged.
#
#   start-alertmanager.sh [alertmanager options...]
set -eu
files=${ALERTMANAGER_SECRET_FILES:-/run/secrets/alertmanager_pagerduty_routing_key /run/secrets/alertmanager_slack_webhook_url}
for file in $files; do
  if [ ! -s "$file" ]; then
    echo "start-alertmanager.sh: $file is missing or empty: set the receiver's key (deploy/README.md, Alertmanager)" >&2
    exit 1
  fi
  if grep -qiE 'placeholder|change-me|replace' "$file"; then
    echo "start-alertmanager.sh: $file holds a placeholder, not a key: set the receiver's key (deploy/README.md, Alertmanager)" >&2
    exit 1
  fi
done
exec "${ALERTMANAGER_BINARY:-/bin/alertmanager}" "$@"
