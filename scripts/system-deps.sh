#!/usr/bin/env bash
# Debian packages the tests need: the PostgreSQL server (schema and role tests run on a real cluster), the MariaDB
# server (stack/mariadb.py: the MySQL-family database, each test server in its own data directory), Chromium with its
# driver (the report and status page tests) and RabbitMQ with its Erlang (stack/rabbitmq.py starts its own node).
set -euo pipefail
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
[ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1 || need+=(mariadb-server)
# The HTML report test and the status page test (tests/statussync/test_statussync_page.py) open pages in headless
# Chromium, driven by Selenium through chromedriver.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
# npm (Debian's package brings Node.js with it) fetches Centrifugo's JavaScript client into the cache by version
# (stack/npm.py, `sortie stack install`): the status page and the browser tests load it.
command -v npm >/dev/null 2>&1 || need+=(npm)
ls /usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server >/dev/null 2>&1 || need+=(rabbitmq-server)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${need[*]} (run as root or install them: apt-get install ${need[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The packages start servers of their own where they can; the tests start their own throwaway ones instead.
  # The package's own MariaDB runs as mysql; ours run as root or as the caller, never as mysql.
  (pgrep -u mysql -x mariadbd >/dev/null 2>&1 && service mariadb stop >/dev/null 2>&1) || true
  (command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | while read -r ver name _; do
     pg_ctlcluster "$ver" "$name" stop || true; done) || true
  # Where invoke-rc.d lets it, the package starts its own node (5672, epmd on 4369); ours never uses it. Only a
  # running one is stopped: the init script's stop starts an epmd of its own when there is none.
  if pgrep -u rabbitmq -x beam.smp >/dev/null 2>&1; then
    service rabbitmq-server stop >/dev/null 2>&1 || true
    epmd -kill >/dev/null 2>&1 || true
  fi
fi
