#!/bin/sh
# As the official image's: options alone mean redis-server; started as root, the data folder
# is handed to user redis and the server drops to it.
set -eu
case "${1:-}" in
    -*) set -- redis-server "$@" ;;
esac
if [ "${1:-}" = redis-server ] && [ "$(id -u)" = 0 ]; then
    chown -R redis:redis /data
    exec setpriv --reuid=redis --regid=redis --init-groups "$@"
fi
exec "$@"
