# shellcheck shell=bash
# Release helpers shared by scripts/deploy-branch.sh and scripts/host/rollback.sh (sourced, never run).
#
# Layout of one target's directory (DEPLOY_ROOT/<deployPath>):
#   deploys/<YYYYMMDDHHMMSS>/   one release per deploy (a shallow clone, built in place)
#   live -> deploys/<ts>         the active release; switched atomically, relative link
#   logs/                        npm-build-<ts>.log per deploy, plus the webhook server's deploy logs
#   shared/src/content/          external content collection, linked into every release
#   scripts/                     operator scripts for this target (optional)
#   .deploy.lock                 flock(1) lock: one deploy or rollback at a time per target
#
# Invariants: `live` only ever points at a release whose build finished (marker .release-built);
# a release is only deleted when it is not live.

# Marker written into a release once its build succeeded; releases without it are debris of an
# interrupted deploy and may be removed by the next deploy.
mark_release_built() { touch -- "$1/.release-built"; }
is_built_release() { [[ -e $1/.release-built ]]; }

log() { printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }
fail() { log "error: $*" >&2; }

# The per-branch systemd unit: astro- plus the target key with / as -. Feature branches
# feature/team-<id>/<anything> belong to the key feature/team-<id>; other branches are their own key.
service_name_for_branch() {
  local branch=$1 key
  if [[ $branch =~ ^(feature/team-[^/]+)/.+ ]]; then
    key=${BASH_REMATCH[1]}
  else
    key=$branch
  fi
  printf 'astro-%s\n' "${key//\//-}"
}

# Release directory name the `live` link points at, or nothing when there is no live release.
live_release_name() {
  local deploy_dir=$1 target
  target=$(readlink -- "$deploy_dir/live" 2>/dev/null) || return 0
  printf '%s\n' "${target##*/}"
}

# Point `live` at deploys/<name> atomically: a new link under a temporary name, then rename(2)
# over the old one (mv -T), so readers see either the old or the new release, never no link.
switch_live() {
  local deploy_dir=$1 name=$2
  local tmp_link="$deploy_dir/.live.tmp.$$"
  ln -sfn -- "deploys/$name" "$tmp_link"
  mv -T -- "$tmp_link" "$deploy_dir/live"
}

# Run $RESTART_COMMAND <service>, split on spaces (no shell, no quoting), with DEPLOY_DIR, PORT and
# RELEASE_DIR in its environment for restart commands that are not systemd. The lock descriptor is
# closed for it: a site process started by the command must not inherit (and hold) the deploy lock.
restart_service() {
  local service=$1 deploy_dir=$2 port=$3
  local -a restart_cmd
  IFS=' ' read -r -a restart_cmd <<<"${RESTART_COMMAND:-sudo systemctl restart}"
  DEPLOY_DIR="$deploy_dir" PORT="$port" RELEASE_DIR="$deploy_dir/live" "${restart_cmd[@]}" "$service" 9>&-
}

# Wait until the site answers HTTP on 127.0.0.1:<port> with a status below 500.
health_check() {
  local port=$1 timeout=${HEALTH_TIMEOUT_SECONDS:-30} path=${HEALTH_PATH:-/}
  local deadline=$((SECONDS + timeout)) status
  while ((SECONDS < deadline)); do
    status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:${port}${path}" || true)
    if [[ $status =~ ^[1-4][0-9][0-9]$ ]]; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# Take the per-target lock on file descriptor 9, waiting up to LOCK_WAIT_SECONDS (default 900).
take_lock() {
  local deploy_dir=$1
  exec 9>"$deploy_dir/.deploy.lock"
  flock -w "${LOCK_WAIT_SECONDS:-900}" 9
}
