#!/usr/bin/env bash
# Stop the node scripts/kube-node-up.sh started in STATE_DIR and remove every trace of it:
# its containers (runc), its processes (the session node.sh leads), the pods' cgroups, the
# mount points it created on the host, the node's netns, and STATE_DIR.
#
#   bash scripts/kube-node-down.sh STATE_DIR
set -uo pipefail
T=$(realpath "$1")
# Only a state directory of kube-node-up.sh: every step below is scoped by its netns name.
if [[ ! -f "$T/netns" ]]; then
    echo "kube-node-down: $T is not a state directory of kube-node-up.sh (no netns file)" >&2
    exit 1
fi
NS=$(cat "$T/netns")
if [[ ! "$NS" =~ ^pcnode-[0-9a-f]{8}$ ]]; then
    echo "kube-node-down: $T/netns names '$NS', not a node's network namespace" >&2
    exit 1
fi
LEADER=$(cat "$T/node.pid" 2>/dev/null || true)

# Containers first, so no workload outlives its shim.
for root in "$T"/runc/*/; do
    [[ -d "$root" ]] || continue
    for id in $(runc --root "$root" list -q 2>/dev/null); do
        runc --root "$root" kill "$id" KILL 2>/dev/null
        runc --root "$root" delete -f "$id" 2>/dev/null
    done
done

# Every process of the node: node.sh's session (etcd, apiserver, containerd and its shims,
# kubelet, scheduler, controller-manager, kube-proxy). SIGKILL after 3 s: kube-apiserver, its
# etcd stopping beside it, takes longer than that to end on SIGTERM, and no state is kept.
# (node.sh was started by setsid: its session id is its pid, whether or not it still runs.)
if [[ -n "$LEADER" ]]; then
    sid=$LEADER
    for sig in TERM KILL; do
        [[ -n "$sid" ]] || break
        pids=$(ps -e -o pid=,sid= | awk -v s="$sid" '$2 == s {print $1}')
        [[ -n "$pids" ]] || break
        [[ $sig == KILL ]] && echo "kube-node-down: still running after SIGTERM: $(ps -o comm= -p "${pids//$'\n'/,}" | xargs)" >&2
        kill -"$sig" $pids 2>/dev/null
        for _ in $(seq 15); do
            pids=$(ps -e -o pid=,sid= | awk -v s="$sid" '$2 == s {print $1}')
            [[ -z "$pids" ]] && break
            sleep 0.2
        done
    done
fi

# Anything still in the node's cgroups (a container process outside the session), then the
# cgroups themselves, deepest first.
for h in /sys/fs/cgroup/*/; do
    [[ -d "$h$NS" ]] || continue
    find "$h$NS" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null
done
# And what is left in the node's network namespace (a process of it outside both).
ip netns pids "$NS" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
rc=0
for h in /sys/fs/cgroup/*/; do
    [[ -d "$h$NS" ]] || continue
    for _ in $(seq 25); do
        find "$h$NS" -depth -type d -exec rmdir {} \; 2>/dev/null
        [[ -d "$h$NS" ]] || break
        sleep 0.2
    done
    [[ -d "$h$NS" ]] && { echo "kube-node-down: could not remove $h$NS" >&2; rc=1; }
done

# The mount points kube-node-up.sh had to create on the host (their tmpfs died with the node),
# unless another node runs: removing a directory another mount namespace has mounted over
# would take that node's mount away.
ip netns del "$NS" 2>/dev/null
if [[ -f "$T/host-dirs-created" ]] && ! ip netns list | grep -q '^pcnode-'; then
    tac "$T/host-dirs-created" | while read -r d; do rmdir "$d" 2>/dev/null || echo "kube-node-down: $d not empty" >&2; done
fi
if mount | grep -q "$T"; then
    echo "kube-node-down: still mounted under $T:" >&2
    mount | grep "$T" >&2
    exit 1
fi
rm -rf "$T"
exit "$rc"
