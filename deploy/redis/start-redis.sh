#!/bin/sh
# Starts redis-server with the ACL users of the rules file $REDIS_ACL_RULES (queue.acl or
# live-logs.acl here), each with its password: from the file $REDIS_PASSWORDS_DIR/<user>
# (a Kubernetes Secret mounted there) or else from REDIS_<USER>_PASSWORD (compose, from
# .env). A user whose password is not given is written disabled. `default` is off: a client
# that does not authenticate can run nothing. A `probe` user may only PING; its password is
# random, written to $REDIS_ACL_DIR/probe-password for the health checks.
#
#   start-redis.sh [redis-server options...]
set -eu
rules=${REDIS_ACL_RULES:?REDIS_ACL_RULES names the rules file}
dir=${REDIS_ACL_DIR:-/run/redis}
umask 077
mkdir -p "$dir"
probe=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
{
  echo "user default off resetkeys resetchannels nocommands"
  echo "user probe on >$probe resetkeys resetchannels nocommands +ping"
  while read -r keyword name rest; do
    case "$keyword" in '' | '#'*) continue ;; esac
    if [ "$keyword" != user ] || [ -z "$name" ]; then
      echo "start-redis.sh: $rules: not a user line: $keyword $name" >&2
      exit 1
    fi
    password=""
    if [ -n "${REDIS_PASSWORDS_DIR:-}" ] && [ -r "$REDIS_PASSWORDS_DIR/$name" ]; then
      password=$(cat "$REDIS_PASSWORDS_DIR/$name")
    else
      variable="REDIS_$(echo "$name" | tr 'a-z-' 'A-Z_')_PASSWORD"
      eval "password=\${$variable:-}"
    fi
    case "$password" in
      *[[:space:]]* | *'>'* | *'<'*)
        echo "start-redis.sh: the password of $name may not hold spaces, < or >" >&2
        exit 1
        ;;
    esac
    if [ -z "$password" ]; then
      echo "start-redis.sh: no password for Redis user $name: it is disabled" >&2
      printf 'user %s off %s\n' "$name" "$rest"
    else
      printf 'user %s on >%s %s\n' "$name" "$password" "$rest"
    fi
  done <"$rules"
} >"$dir/users.acl"
printf '%s' "$probe" >"$dir/probe-password"
if [ "$(id -u)" = 0 ] && id redis >/dev/null 2>&1; then
  chown -R redis "$dir"  # the image's entry point runs redis-server as `redis`
fi
if command -v docker-entrypoint.sh >/dev/null 2>&1; then
  exec docker-entrypoint.sh redis-server "$@" --aclfile "$dir/users.acl"
fi
exec redis-server "$@" --aclfile "$dir/users.acl"
