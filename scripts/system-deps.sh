#!/usr/bin/env bash
# Debian packages the tests need: the PostgreSQL server (schema and role tests run on a real cluster) and
# Chromium with its driver (the report test).
set -euo pipefail
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
# The HTML report test opens report.html in headless Chromium, driven by Selenium through chromedriver.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${need[*]} (run as root or install them: apt-get install ${need[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The package starts a cluster of its own; the tests start their own throwaway clusters instead.
  (command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | while read -r ver name _; do
     pg_ctlcluster "$ver" "$name" stop || true; done) || true
fi
