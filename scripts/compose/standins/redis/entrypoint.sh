#!/bin/sh
set -e
case "$1" in -*) set -- redis-server "$@" ;; esac
if [ "$1" = redis-server ]; then shift; exec redis-server --protected-mode no --dir /data "$@"; fi
exec "$@"
