#!/usr/bin/env bash
# Install the Debian packages zlane needs to build and test, when missing.
# As root it installs them with apt-get; otherwise it names them and fails.
#
#   scripts/deps.sh [--test] [PACKAGE...]
#
# With no options: what the build and `make demo` need. --test (what `make
# test` runs) adds what only the tests need: PostgreSQL, for the harness in
# tests/support/pg_harness.c, which starts a throwaway cluster of its own for
# each test (initdb, postgres on 127.0.0.1). The Debian package's own cluster
# (15/main, port 5432) is not used: if installing the package created and
# started it, it is stopped and set to start manually only. And Patroni and
# etcd, for tests/support/patroni_harness.c, which starts its own etcd and
# two Patroni nodes; the services the packages start or enable are stopped
# and disabled.
# --test also makes sure `node` and `npm` exist (Debian's nodejs and npm
# when they do not: a NodeSource nodejs brings its own npm) and installs the
# Node.js client's npm dependencies (npm ci in clients/node, from its
# package-lock.json) when clients/node/node_modules is missing, and the
# dashboard tests' (puppeteer-core, npm ci in web) when web/node_modules is;
# with Debian's chromium and a font for them.
# Further arguments are more packages to install (e.g. beanstalkd).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

packages=(gcc make cmake pkg-config
          libzmq3-dev libczmq-dev libprotobuf-c-dev protobuf-c-compiler
          libsodium-dev          # CURVE in zlane's own ZMTP (common/zmtp.c)
          libcmocka-dev liblmdb-dev iproute2 procps
          clang libclang-rt-dev  # libFuzzer: the fuzz targets of make test
          clang-format           # scripts/check-format.sh, the first step of make test
          protobuf-compiler python3-protobuf)  # proto3 decoding in Python: tests/wire
test_packages=(postgresql-15 libpq-dev  # tests/support/pg_harness: initdb, postgres, libpq
               patroni etcd-server    # tests/support/patroni_harness: a failover cluster
               python3-zmq python3-pytest  # clients/python: the client and its pytest suite
               chromium fonts-dejavu-core)  # web/test: the dashboard in a headless browser
tests=false
if [ "${1:-}" = --test ]; then
  shift
  tests=true
  packages+=("${test_packages[@]}")
  command -v node >/dev/null 2>&1 || packages+=(nodejs)
  command -v npm >/dev/null 2>&1 || packages+=(npm)
fi

# clients/node's npm packages (zeromq with its prebuilt addon, protobufjs),
# for its tests (test_node_client): from the npm registry, once.
node_deps() {
  $tests || return 0
  if [ ! -d "$root/clients/node/node_modules" ]; then
    echo "installing the Node.js client's npm dependencies (npm ci in clients/node)"
    (cd "$root/clients/node" && npm ci --no-audit --no-fund --loglevel=error)
  fi
  # web/: puppeteer-core for the dashboard's browser tests (it downloads no
  # browser: the tests drive Debian's /usr/bin/chromium)
  if [ ! -d "$root/web/node_modules" ]; then
    echo "installing the dashboard tests' npm dependencies (npm ci in web)"
    (cd "$root/web" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
  fi
}
if [ "$#" -gt 0 ]; then packages+=("$@"); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  node_deps
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "zlane needs these Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

# Installing postgresql-15 makes the cluster 15/main and starts it (where
# services may start). The tests start their own; stop this one and keep it
# from starting at boot (start.conf "manual": pg_ctlcluster still starts it
# by hand). Only when this run installed the package: a cluster that was
# there before is someone else's.
if [[ " ${missing[*]} " == *" postgresql-15 "* ]] && [ -f /etc/postgresql/15/main/start.conf ]; then
  if pg_ctlcluster 15 main status >/dev/null 2>&1; then
    echo "stopping the PostgreSQL cluster 15/main the package started (the tests run their own)"
    pg_ctlcluster 15 main stop
  fi
  sed -i 's/^auto$/manual/' /etc/postgresql/15/main/start.conf
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload  # the generator reads start.conf
    systemctl disable --quiet postgresql.service || true
  fi
fi

# Installing etcd-server starts the system's etcd (127.0.0.1:2379, where
# services may start) and enables it at boot; installing patroni enables
# patroni.service (idle without /etc/patroni/config.yml). The tests start
# their own etcd and Patroni nodes (tests/support/patroni_harness.c, on free
# ports): stop and disable these. Only when this run installed the package.
for pair in etcd-server:etcd patroni:patroni; do
  pkg=${pair%%:*} service=${pair#*:}
  [[ " ${missing[*]} " == *" $pkg "* ]] || continue
  if [ -d /run/systemd/system ]; then
    if systemctl is-active --quiet "$service.service"; then
      echo "stopping the $service service the package started (the tests run their own)"
    fi
    systemctl disable --now --quiet "$service.service" || true
  elif [ -x "/etc/init.d/$service" ]; then
    if "/etc/init.d/$service" status >/dev/null 2>&1; then
      echo "stopping the $service service the package started (the tests run their own)"
      "/etc/init.d/$service" stop >/dev/null
    fi
    update-rc.d "$service" disable >/dev/null 2>&1 || true
  fi
done

node_deps
