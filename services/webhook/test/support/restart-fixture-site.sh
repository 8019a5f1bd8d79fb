#!/usr/bin/env bash
# Test stand-in for `sudo systemctl restart <service>`: stops the fixture site started for this
# target (if any) and starts the live release on PORT, detached in its own session so killing a
# deploy's process group never takes the site down. DEPLOY_DIR and PORT come from deploy-branch.sh;
# with SITE_USER (isolation) the site runs as that user, like the rendered unit's User=.
# Like systemctl with a Type=simple unit, it succeeds even when the site dies right after starting.
set -euo pipefail
IFS=$'\n\t'
service=$1
pid_file="$DEPLOY_DIR/site-$service.pid"
if [[ -f $pid_file ]]; then
  old_pid=$(<"$pid_file")
  if kill -0 "$old_pid" 2>/dev/null; then
    kill "$old_pid" || true
    # Gone, or a zombie waiting for init to reap it (slow in some containers), counts as stopped.
    for _ in $(seq 100); do
      state=$(ps -o stat= -p "$old_pid" 2>/dev/null || true)
      [[ -z $state || $state == Z* ]] && break
      sleep 0.05
    done
  fi
  rm -f -- "$pid_file"
fi
as_site=()
if [[ -n ${SITE_USER:-} ]]; then
  as_site=(setpriv "--reuid=$SITE_USER" "--regid=$(id -g -- "$SITE_USER")" --init-groups --no-new-privs --)
fi
mkdir -p -- "$DEPLOY_DIR/logs"
# The site runs from its folder in the release (SITE_DIR, inherited from deploy-branch.sh), like the unit.
cd -- "$DEPLOY_DIR/live/${SITE_DIR:-.}"
PORT="$PORT" setsid "${as_site[@]}" node server.mjs >>"$DEPLOY_DIR/logs/site.log" 2>&1 </dev/null &
printf '%s\n' "$!" >"$pid_file"
printf 'restart %s\n' "$service" >>"$DEPLOY_DIR/restarts.log"
