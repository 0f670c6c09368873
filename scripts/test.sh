#!/usr/bin/env bash
# Runs every check: formatting, vet, staticcheck, and the whole test suite under the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
if [ -f package-lock.json ] && [ ! -d node_modules ]; then
  npm ci --no-audit --no-fund
fi
go test -race -count=1 -timeout 15m ./...
# The images' build and checks, which skip themselves under the race detector
# (its instrumented gzip makes them take minutes).
go test -count=1 -timeout 10m -run TestImagesAreReproducibleAndRunAsNonRoot ./scripts/images
# test/helm is a module of its own, which keeps Helm's and Kubernetes' modules
# out of Toolbus's: the chart rendered and decoded into the Kubernetes API
# types, and the official NATS chart with the documented values. Its tests
# start no goroutines of their own, and building Helm's and Kubernetes'
# modules for the race detector would cost CI minutes for nothing.
(cd test/helm && go vet ./... && go test -count=1 -timeout 15m ./...)
