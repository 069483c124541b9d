#!/usr/bin/env bash
# Make sure Postgres (127.0.0.1:5432) and Redis (127.0.0.1:6379) answer; start local ones if not.
# Installs them from Debian's packages when missing and we are root. Says what it did.
set -euo pipefail

PG_HOST=127.0.0.1 PG_PORT=5432 REDIS_PORT=6379

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "!! $* missing and not root: install it or point DATABASE_URL/REDIS_URL elsewhere" >&2
    exit 1
  fi
  echo "--> installing $* from Debian packages"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if port_open "$PG_PORT"; then
  echo "--> postgres already answering on $PG_HOST:$PG_PORT"
else
  command -v pg_ctlcluster >/dev/null || apt_install postgresql
  version=$(ls /etc/postgresql | sort -V | tail -1)
  if [ ! -d "/etc/postgresql/$version/main" ]; then
    pg_createcluster "$version" main >/dev/null
  fi
  # Local trust auth on loopback, as on the CI machines.
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  grep -q "inferscale-trust" "$hba" || sed -i '1i host all all 127.0.0.1/32 trust # inferscale-trust\nlocal all all trust # inferscale-trust' "$hba"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 30); do port_open "$PG_PORT" && break; sleep 1; done
  echo "--> started local postgres $version on $PG_HOST:$PG_PORT"
fi

if port_open "$REDIS_PORT"; then
  echo "--> redis already answering on 127.0.0.1:$REDIS_PORT"
else
  command -v redis-server >/dev/null || apt_install redis-server
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" \
    --appendonly no --dir /var/lib/redis --logfile /var/log/redis/inferscale.log
  for _ in $(seq 30); do port_open "$REDIS_PORT" && break; sleep 1; done
  echo "--> started local redis on 127.0.0.1:$REDIS_PORT"
fi

# The application database (tests make their own scratch databases).
if ! psql -h "$PG_HOST" -U postgres -tAc "select 1 from pg_database where datname='inferscale'" | grep -q 1; then
  psql -h "$PG_HOST" -U postgres -qc "create database inferscale"
  echo "--> created database inferscale"
fi

# A real browser for the dashboard's browser test (Debian's Chromium, driven by Playwright).
if [ "${INFERSCALE_NEED_BROWSER:-0}" = 1 ] && ! command -v chromium >/dev/null; then
  apt_install chromium
fi
command -v chromium >/dev/null && echo "--> chromium: $(command -v chromium)" || true
