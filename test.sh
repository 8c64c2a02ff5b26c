#!/usr/bin/env bash
# Runs cellserver's whole test suite: formatting, vet, and every package's
# tests (unit and end-to-end) under the race detector. Installs what the
# end-to-end tests drive (redis-cli) when it is missing and we can.
set -euo pipefail
cd "$(dirname "$0")"

# spec/ (the contract) and conformance/ (its vectors, never edited here) are
# kept in the repository so that a clone is complete. Where the project's
# shared originals sit beside the checkout (../shared), the copies must equal
# them.
for d in spec conformance; do
  if [ -d "../shared/$d" ]; then
    if ! diff -r "../shared/$d" "$d" >/dev/null 2>&1; then
      echo "test.sh: $d/ differs from ../shared/$d:"
      diff -rq "../shared/$d" "$d" || true
      exit 1
    fi
  else
    echo "test.sh: no ../shared/$d beside this checkout; $d/ is used as it is"
  fi
done

# redis-cli drives the e2e tests; redis-server is the reference of the
# differential tests (tests/differential_test.go) and checks the benchmark's
# Lua reference against cellserver. Debian's redis-server package brings both.
if ! command -v redis-cli >/dev/null 2>&1 || ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing redis-server (redis-cli, redis-server, redis-benchmark)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null || true
  fi
  command -v redis-cli >/dev/null 2>&1 || echo "test.sh: WARNING: redis-cli not found and cannot install it; redis-cli tests will SKIP"
  command -v redis-server >/dev/null 2>&1 || echo "test.sh: WARNING: redis-server not found; the differential and bench Lua tests will SKIP"
fi
# redis-py drives tests/tx_test.go's TestTxRedisPy (pipeline() is MULTI/EXEC);
# Debian's python3-redis puts it in the system python3.
if ! /usr/bin/python3 -c 'import redis' >/dev/null 2>&1 && ! python3 -c 'import redis' >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing python3-redis (redis-py)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-redis >/dev/null || true
  fi
  /usr/bin/python3 -c 'import redis' >/dev/null 2>&1 || python3 -c 'import redis' >/dev/null 2>&1 ||
    echo "test.sh: WARNING: redis-py not found and cannot install it; TestTxRedisPy will SKIP"
fi
# ip (iproute2) puts a client in a network namespace, so the e2e tests can
# check what a non-loopback client may do.
if ! command -v ip >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing iproute2 (ip)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null || true
  fi
  command -v ip >/dev/null 2>&1 || echo "test.sh: WARNING: ip not found; the non-loopback admin test will SKIP"
fi

# redis-rb (Debian's ruby-redis) is one of the cluster clients the e2e tests
# drive (tests/clusterclients_test.go).
if ! command -v ruby >/dev/null 2>&1 || ! ruby -e "require 'redis'" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing ruby-redis (redis-rb)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ruby-redis >/dev/null || true
  fi
  ruby -e "require 'redis'" >/dev/null 2>&1 || echo "test.sh: WARNING: ruby-redis not installed; the redis-rb test will SKIP"
fi

# node-redis and ioredis (tests/noderedis, tests/ioredis: npm packages pinned
# by their package-lock.json, installed by the tests with npm ci) need
# Node.js and npm; Debian's nodejs and npm packages bring both.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing nodejs and npm"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null || true
  fi
  { command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; } ||
    echo "test.sh: WARNING: node/npm not installed; the node-redis and ioredis tests will SKIP"
fi
# The pinned clients need Node.js 20 or later (Debian 12's nodejs is 18).
if command -v node >/dev/null 2>&1; then
  node_major=$(node --version 2>/dev/null | sed 's/^v\([0-9]*\).*/\1/')
  [ "${node_major:-0}" -ge 20 ] 2>/dev/null ||
    echo "test.sh: WARNING: node $(node --version 2>/dev/null) is older than 20; the node-redis and ioredis tests will SKIP (install Node.js 20 or later)"
fi

# The gateway e2e tests drive real gateways and a real Prometheus: nginx
# (auth_request), Caddy (forward_auth) and Prometheus scraping /metrics
# (tests/gateway_*_test.go, tests/metrics_test.go). Debian's packages; their
# services are not started (the tests run each binary with its own config).
missing=()
for p in nginx:nginx caddy:caddy prometheus:prometheus; do
  command -v "${p%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${p%%:*}" ] || [ -x "/usr/bin/${p%%:*}" ] || missing+=("${p#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing ${missing[*]}"
    # policy-rc.d 101: install without starting the packages' services.
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || true
    rm -f /usr/sbin/policy-rc.d
  fi
  for p in nginx caddy prometheus; do
    command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] || [ -x "/usr/bin/$p" ] || echo "test.sh: WARNING: $p not installed; its gateway test will SKIP"
  done
fi

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "test.sh: gofmt needed on: $unformatted"
  exit 1
fi
go vet ./...
# go test -json, so that the reason of every skip is known:
# internal/testsummary prints what go test prints without -v (a line per
# package, the output of failed tests), then every skipped test with its
# reason, then the failures. Under pipefail a failing go test fails the run
# whatever the summary saw.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/testsummary" ./internal/testsummary
go test -race -count=1 -timeout 14m -json ./... | "$tmp/testsummary"
