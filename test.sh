#!/usr/bin/env bash
# Runs cellserver's whole test suite: formatting, vet, and every package's
# tests (unit and end-to-end) under the race detector. Installs what the
# end-to-end tests drive (redis-cli) when it is missing and we can.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v redis-cli >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing redis-tools for redis-cli"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools >/dev/null
  else
    echo "test.sh: WARNING: redis-cli not found and cannot install it; redis-cli tests will SKIP"
  fi
fi

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "test.sh: gofmt needed on: $unformatted"
  exit 1
fi
go vet ./...
go test -race -count=1 -timeout 14m ./...
