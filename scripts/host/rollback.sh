#!/usr/bin/env bash
# Roll a target back: point `live` at an earlier built release, restart the service and check that
# the site answers. Without <release>, the newest built release older than the live one is chosen.
#
#   scripts/host/rollback.sh <deployDir> <port> <service> [<release>]
#
# Environment: RESTART_COMMAND, HEALTH_TIMEOUT_SECONDS, HEALTH_PATH, LOCK_WAIT_SECONDS and SITE_USER
# (isolation: only that user's group may read the live release) as for scripts/deploy-branch.sh.
# This is the only way a target goes back to an older commit: pushes never roll back.
#
# Exit codes:
#   0 rolled back and answering   1 unexpected error   2 usage
#   3 lock not obtained in time   4 no earlier built release (or the named one is not built)
#   7 restart failed, the release that was live is restored
#   8 health check failed, the release that was live is restored
set -euo pipefail
IFS=$'\n\t'

here=$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")
# shellcheck source-path=SCRIPTDIR
source "$here/lib/releases.sh"

usage() {
  echo 'usage: rollback.sh <deployDir> <port> <service> [<release>]' >&2
  exit 2
}

(($# == 3 || $# == 4)) || usage
deploy_dir=$1
port=$2
service=$3
wanted=${4:-}
[[ $deploy_dir == /* && -d $deploy_dir/deploys ]] || { fail "not a deploy directory: $deploy_dir"; usage; }
[[ $port =~ ^[0-9]{1,5}$ ]] || { fail "invalid port: $port"; usage; }
[[ $service =~ ^[A-Za-z0-9@._-]+$ ]] || { fail "invalid service name: $service"; usage; }
[[ -z $wanted || $wanted =~ ^[0-9]{14}$ ]] || { fail "a release is a 14-digit timestamp"; usage; }

site_group=
if [[ -n ${SITE_USER:-} ]]; then
  ((EUID == 0)) || { fail "isolation (SITE_USER) needs root"; exit 2; }
  site_group=$(id -gn -- "$SITE_USER") || { fail "user $SITE_USER does not exist"; exit 2; }
fi

take_lock "$deploy_dir" || { fail "another deploy of $deploy_dir holds the lock"; exit 3; }

current=$(live_release_name "$deploy_dir")
if [[ -z $wanted ]]; then
  mapfile -t releases < <(find "$deploy_dir/deploys" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort -r)
  for name in "${releases[@]}"; do
    if [[ -z $current || $name < $current ]] && is_built_release "$deploy_dir/deploys/$name"; then
      wanted=$name
      break
    fi
  done
fi
if [[ -z $wanted ]] || ! is_built_release "$deploy_dir/deploys/$wanted"; then
  fail "no earlier built release to roll back to (live: ${current:-none})"
  exit 4
fi

log "rolling $service back from ${current:-none} to $wanted"
switch_live "$deploy_dir" "$wanted" "$site_group"
restore() {
  if [[ -n $current ]]; then
    switch_live "$deploy_dir" "$current" "$site_group"
    restart_service "$service" "$deploy_dir" "$port" || fail "restart after restoring $current failed"
  fi
}
restart_service "$service" "$deploy_dir" "$port" || { fail "restart failed"; restore; exit 7; }
health_check "$port" "${SITE_USER:-}" || { fail "the site did not answer as $service on port $port"; restore; exit 8; }
close_other_releases "$deploy_dir" "$site_group"
# The operator's choice is what is live now: an earlier interrupted deploy's note of what to put
# back (deploy-branch.sh, .switch-pending) no longer applies.
rm -f -- "$deploy_dir/.switch-pending"
log "live -> deploys/$wanted"
printf 'release=%s\n' "$wanted"
