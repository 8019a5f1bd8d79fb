#!/usr/bin/env bash
# RESTART_COMMAND for the deploy test: (re)starts the built site of the live release on $PORT, as the
# astro-<branch> systemd unit would. Usage: restart-site.sh <service>; DEPLOY_DIR, PORT and RELEASE_DIR
# come from deploy-branch.sh.
set -euo pipefail
pidfile="$DEPLOY_DIR/site.pid"
if [[ -f $pidfile ]]; then
  kill "$(<"$pidfile")" 2>/dev/null || true
  # Wait until the old server is gone (up to 30 s on a loaded machine): the new one needs its port.
  for _ in $(seq 300); do kill -0 "$(<"$pidfile")" 2>/dev/null || break; sleep 0.1; done
fi
cd -- "$RELEASE_DIR/services/web"
PORT="$PORT" HOST=127.0.0.1 NODE_ENV=production API_PUBLIC_URL=http://127.0.0.1:9 nohup node dist/server/entry.mjs >>"$DEPLOY_DIR/site.log" 2>&1 &
echo "$!" >"$pidfile"
