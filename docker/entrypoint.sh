#!/bin/sh
# entrypoint.sh - the interpd image's entrypoint, run by tini (PID 1).
#
#   entrypoint.sh serve|keys|cleanup|version|help|-...   runs interpd with them
#   entrypoint.sh /some/command ...                      runs that command
#
# As the image's user (interpd, uid 10001: the default) it only runs the
# command.  Started as root (docker/compose.sandbox.yaml sets user "0:0"),
# it first hands a cgroup v2 subtree of the container to the interpd user,
# as systemd's Delegate=yes does for a service, then drops to that user for
# good: interpd itself never runs as root.  Why the sandbox wants a cgroup,
# and which security options the container needs: docs/DEPLOYMENT.md.
#
# For tests only: IPD_DOCKER_CGROUP (the cgroup2 directory to use instead of
# /sys/fs/cgroup, skipping the cgroup-namespace check) and
# IPD_DOCKER_UID / IPD_DOCKER_GID (the ids to run as instead of interpd's).
set -eu

log() { echo "entrypoint: $*" >&2; }

if [ "$#" -eq 0 ]; then
    set -- serve
fi
case "$1" in
serve | keys | cleanup | status | version | help | -*)
    set -- /usr/local/bin/interpd "$@"
    ;;
esac

# Give the container's cgroup to run_uid the way systemd delegates one:
#   <root>/init     every process that was in the root (tini, ...)
#   <root>/service  this script, then interpd; owned by run_uid
# The kernel lets a cgroup enable controllers for its children only while
# it holds no processes itself ("no internal processes"), hence the moves
# before "+memory +pids" is written to the root's subtree_control.
delegate_cgroup() {
    cg=${IPD_DOCKER_CGROUP:-/sys/fs/cgroup}
    if [ "$(stat -fc %T "$cg" 2>/dev/null)" != cgroup2fs ]; then
        log "no cgroup v2 at $cg: nothing delegated"
        return 0
    fi
    if [ -z "${IPD_DOCKER_CGROUP:-}" ] && [ "$(cat /proc/self/cgroup)" != "0::/" ]; then
        log "not in a private cgroup namespace (--cgroupns=private): nothing delegated"
        return 0
    fi
    if ! mkdir -p "$cg/init" "$cg/service" 2>/dev/null; then
        log "$cg is read-only (needs --security-opt writable-cgroups=true, Docker Engine 28+): nothing delegated"
        return 0
    fi
    for pid in $(cat "$cg/cgroup.procs"); do
        # Processes that already exited (the cat above) fail; that's fine.
        echo "$pid" >"$cg/init/cgroup.procs" 2>/dev/null || :
    done
    echo $$ >"$cg/service/cgroup.procs"
    for c in memory pids; do
        echo "+$c" >"$cg/cgroup.subtree_control" 2>/dev/null ||
            log "controller $c is not available in $cg"
    done
    # What systemd hands over with Delegate=yes: the directory (to create
    # children) and the files that move processes and enable controllers.
    # The limits of service/ itself stay root's.
    chown "$run_uid:$run_gid" "$cg/service" "$cg/service/cgroup.procs" \
        "$cg/service/cgroup.subtree_control" "$cg/service/cgroup.threads"
    log "delegated $cg/service to uid $run_uid (controllers: $(cat "$cg/service/cgroup.controllers"))"
}

if [ "$(id -u)" -eq 0 ]; then
    run_uid=${IPD_DOCKER_UID:-$(id -u interpd)}
    run_gid=${IPD_DOCKER_GID:-$(id -g interpd)}
    delegate_cgroup
    home=$(getent passwd "$run_uid" | cut -d: -f6 || :)
    export HOME="${home:-/var/lib/interpd}"
    log "dropping root: running as uid $run_uid, gid $run_gid"
    exec setpriv --reuid="$run_uid" --regid="$run_gid" --clear-groups \
        --inh-caps=-all --bounding-set=-all -- "$@"
fi
exec "$@"
