#!/bin/sh
# /usr/local/bin/sites-restart in the webhook image: the deploy script's restart command and the sites
# container's health check (`--ping`). APP_ROOT is the image's WORKDIR; only the stack rehearsal,
# which runs the image's files from a temporary folder, sets it.
exec node "${APP_ROOT:-/app}/infra/sites/restart-client.js" "$@"
