#!/usr/bin/env bash
# Runs deploy/compose/compose.yaml in containers and checks it
# (test/compose: up with one command, a call through the command line and
# through the MCP front, one NATS node's container killed, calls still
# complete). Needs root. It installs Debian's podman, runc and docker-compose,
# builds the images with scripts/images, and runs docker-compose against
# podman's Docker API on a socket of its own, with a containers.conf of its
# own: the OCI runtime runc and no default ulimits (what this check's
# machines need; another host may drop both). The output is what
# docs/BENCHMARKS.md records.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v docker-compose >/dev/null || need+=(docker-compose)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

work=$(mktemp -d)
service_pid=""
cleanup() {
  if [ -n "$service_pid" ]; then kill "$service_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/containers.conf" <<'CONF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF="$work/containers.conf"

echo "== images"
go run ./scripts/images --out "$work/images"
podman load -q -i "$work/images/toolbus.tar"
podman load -q -i "$work/images/nats-server.tar"

echo "== podman's Docker API on $work/podman.sock"
# Without systemd, podman cannot schedule health checks and says so at every
# container; the test runs each container's check itself.
podman system service --time=0 "unix://$work/podman.sock" 2>"$work/podman-service.log" &
service_pid=$!
for _ in $(seq 100); do [ -S "$work/podman.sock" ] && break; sleep 0.1; done
export DOCKER_HOST="unix://$work/podman.sock"

echo "== $(podman --version), $(runc --version | head -1), $(docker-compose version --short 2>/dev/null || docker-compose --version)"
TOOLBUS_COMPOSE_TEST=1 go test -count=1 -v -timeout 15m -run TestComposeSurvivesANodeKilled ./test/compose
