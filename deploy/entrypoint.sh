#!/bin/sh
# The container's entry point, also usable on its own.
#
#   entrypoint.sh [serve [ARGS...]]   `drift-monitor migrate` first when DRIFT_MONITOR_MIGRATE_ON_START=1,
#                                     then exec `drift-monitor serve`
#   entrypoint.sh COMMAND [ARGS...]   exec any other drift-monitor command (migrate, poll, prune, ...)
#
# The config file is $DRIFT_MONITOR_CONFIG, else /etc/drift-monitor/drift-monitor.toml when it
# exists, else none: settings then come from DRIFT_MONITOR_* variables alone. serve listens on
# $DRIFT_MONITOR_HOST:$DRIFT_MONITOR_PORT (default 0.0.0.0:8000). It replaces this shell, so it
# receives SIGTERM itself, lets in-flight polls finish (10 s at most), frees its leases and exits 0.
set -eu

if [ -z "${DRIFT_MONITOR_CONFIG:-}" ] && [ -f /etc/drift-monitor/drift-monitor.toml ]; then
    DRIFT_MONITOR_CONFIG=/etc/drift-monitor/drift-monitor.toml
fi
if [ -n "${DRIFT_MONITOR_CONFIG:-}" ]; then
    # Every command that reads a config (migrate, poll, prune, serve) defaults to this variable.
    export DRIFT_MONITOR_CONFIG
fi

command=serve
if [ "$#" -gt 0 ]; then
    command=$1
    shift
fi
if [ "$command" != serve ]; then
    exec drift-monitor "$command" "$@"
fi

case "${DRIFT_MONITOR_MIGRATE_ON_START:-0}" in
    1 | true | yes)
        # One instance only: replicas sharing a database migrate once, in a one-shot job, first.
        drift-monitor migrate
        ;;
    0 | false | no | "") ;;
    *)
        echo "entrypoint: DRIFT_MONITOR_MIGRATE_ON_START must be 1 or 0, not '$DRIFT_MONITOR_MIGRATE_ON_START'" >&2
        exit 2
        ;;
esac

host=${DRIFT_MONITOR_HOST:-0.0.0.0}
port=${DRIFT_MONITOR_PORT:-8000}
if [ -n "${DRIFT_MONITOR_CONFIG:-}" ]; then
    exec drift-monitor serve --host "$host" --port "$port" --config "$DRIFT_MONITOR_CONFIG" "$@"
fi
exec drift-monitor serve --host "$host" --port "$port" "$@"
