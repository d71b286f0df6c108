#!/usr/bin/env bash
# Runs a local JetStream cluster on 127.0.0.1 in the foreground, for users
# who want to run the servers themselves (watch their logs, restart one,
# point natscli at them) while jsbench measures:
#
#   scripts/local-cluster.sh                 # 3 nodes, clients on 4222-4224
#   NODES=5 BASE_PORT=5222 scripts/local-cluster.sh
#   jsbench run quick -s nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224 --replicas 3
#
# `jsbench run --cluster 3` does the same by itself on free ports. This
# script uses the pinned nats-server from .tools/ (scripts/setup.sh installs
# it; NATS_SERVER_BIN overrides), binds everything to loopback only, keeps
# the stores in a temporary folder (STORE_DIR to choose one), and stops every
# node and removes a temporary store on Ctrl-C or when any node exits.
#
# Ports for node i (1-based): client BASE_PORT+i-1, routes
# CLUSTER_BASE_PORT+i-1 (default 6222), monitoring HTTP_BASE_PORT+i-1
# (default 8222).
#
# STRICT_ACCOUNT=1 puts clients into an account that requires max_bytes on
# every stream (nats-server's max_bytes_required, as managed and
# multi-tenant deployments set it; user bench, password bench), to see
# what jsbench does where streams must be sized (docs/connecting.md).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${NATS_SERVER_VERSION:-2.15.1}"
bin="${NATS_SERVER_BIN:-$root/.tools/nats-server-$version/bin/nats-server}"
nodes="${NODES:-3}"
base="${BASE_PORT:-4222}"
cluster_base="${CLUSTER_BASE_PORT:-6222}"
http_base="${HTTP_BASE_PORT:-8222}"
name="${CLUSTER_NAME:-jsbench-local}"

if [ ! -x "$bin" ]; then
    echo "error: nats-server not found at $bin; run scripts/setup.sh (or set NATS_SERVER_BIN)" >&2
    exit 1
fi
case "$nodes" in
    3 | 5) ;;
    *)
        echo "error: NODES=$nodes; a local cluster has 3 or 5 nodes" >&2
        exit 2
        ;;
esac

if [ -n "${STORE_DIR:-}" ]; then
    store="$STORE_DIR"
    mkdir -p "$store"
    remove_store=false
else
    store="$(mktemp -d "${TMPDIR:-/tmp}/jsbench-cluster-XXXXXX")"
    remove_store=true
fi

routes=""
for i in $(seq 1 "$nodes"); do
    routes="${routes:+$routes,}nats://127.0.0.1:$((cluster_base + i - 1))"
done

config_args=()
if [ "${STRICT_ACCOUNT:-0}" = 1 ]; then
    cat >"$store/accounts.conf" <<'CONF'
accounts {
  BENCH: {
    jetstream: { max_mem: 1G, max_file: 8G, max_bytes_required: true }
    users: [ { user: bench, password: bench } ]
  }
}
CONF
    config_args=(-c "$store/accounts.conf")
fi

pids=()
stop() {
    trap - EXIT INT TERM
    if [ "${#pids[@]}" -gt 0 ]; then
        kill "${pids[@]}" 2>/dev/null || true
        wait "${pids[@]}" 2>/dev/null || true
    fi
    if $remove_store; then
        rm -rf "$store"
    fi
    echo "stopped $name" >&2
}
trap stop EXIT
trap 'exit 130' INT TERM

urls=""
for i in $(seq 1 "$nodes"); do
    node="$name-n$i"
    mkdir -p "$store/$node"
    "$bin" --name "$node" --cluster_name "$name" \
        -a 127.0.0.1 -p "$((base + i - 1))" -m "$((http_base + i - 1))" \
        --cluster "nats://127.0.0.1:$((cluster_base + i - 1))" --routes "$routes" \
        -js -sd "$store/$node" "${config_args[@]}" >"$store/$node.log" 2>&1 &
    pids+=("$!")
    urls="${urls:+$urls,}nats://127.0.0.1:$((base + i - 1))"
done

# Ready when a node's /jsz names a JetStream meta leader (an R3 stream
# created before that fails with "insufficient resources").
for attempt in $(seq 1 200); do
    for pid in "${pids[@]}"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "error: a node exited during start-up; logs in $store/*.log:" >&2
            tail -n 5 "$store"/*.log >&2
            remove_store=false
            exit 1
        fi
    done
    if (
        exec 3<>"/dev/tcp/127.0.0.1/$http_base"
        printf 'GET /jsz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
        grep -q '"leader": *"[^"]' <&3
    ) 2>/dev/null; then
        break
    fi
    sleep 0.1
done
if [ "$attempt" -eq 200 ]; then
    echo "error: no JetStream meta leader after 20 s; logs in $store/*.log" >&2
    remove_store=false
    exit 1
fi

echo "$urls"
echo "cluster $name: $nodes JetStream nodes on 127.0.0.1 (monitoring from port $http_base), stores in $store" >&2
if [ "${#config_args[@]}" -gt 0 ]; then
    echo "  account BENCH requires max_bytes on every stream" >&2
    echo "  jsbench run quick -s $urls --replicas 3 --user bench --password bench" >&2
else
    echo "  jsbench run quick -s $urls --replicas 3" >&2
fi
if $remove_store; then
    echo "Ctrl-C stops every node and removes the stores" >&2
else
    echo "Ctrl-C stops every node (the stores in $store stay)" >&2
fi
# Any node exiting ends the cluster: a half-cluster would measure nonsense.
wait -n "${pids[@]}" || true
echo "a node exited; stopping the cluster" >&2
exit 1
