#!/usr/bin/env bash
# Deploy one branch of the site into a target directory as a new release, switch `live` to it
# atomically, restart the target's service and check that the site answers. On any failure the
# previous release stays (or is put back) live.
#
# Called by the webhook server with exactly four arguments, and by operators the same way:
#   scripts/deploy-branch.sh <branch> <deployDir> <port> <repoUrl>
#
# Environment (all optional):
#   KEEP_RELEASES          releases to keep, newest first; the live one is never deleted (5)
#   RESTART_COMMAND        command run as `$RESTART_COMMAND <service>`, split on spaces
#                          (sudo systemctl restart); it also gets DEPLOY_DIR, PORT and RELEASE_DIR
#   SERVICE_NAME           unit to restart (astro- plus the target key with / as -, derived from the branch)
#   HEALTH_TIMEOUT_SECONDS how long the site may take to answer after the restart (30)
#   HEALTH_PATH            path requested for the health check; any status below 500 passes (/)
#   LOCK_WAIT_SECONDS      how long to wait for another deploy of the same target (900)
#   npm_config_cache       npm cache directory (npm's default, ~/.npm)
#   SITE_DIR               the site's folder inside the repository, relative (.); its src/content is the
#                          one replaced by the shared collection (services/web for the platform's own site)
#
# Exit codes:
#   0 deployed and live          1 unexpected error             2 usage (bad arguments)
#   3 lock not obtained in time  4 git clone failed             5 npm ci failed
#   6 build failed               7 restart failed, previous release restored
#   8 health check failed, previous release restored
#   130/143 interrupted (SIGINT/SIGTERM); the previous release stays or is put back live
set -euo pipefail
IFS=$'\n\t'

here=$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")
# shellcheck source-path=SCRIPTDIR
source "$here/host/lib/releases.sh"

usage() {
  cat >&2 <<'EOF'
usage: deploy-branch.sh <branch> <deployDir> <port> <repoUrl>
  branch     the branch to deploy (e.g. main, feature/team-de1/map)
  deployDir  the target's absolute directory (DEPLOY_ROOT/<deployPath>)
  port       the port the target's site listens on
  repoUrl    the repository to clone
EOF
  exit 2
}

(($# == 4)) || usage
branch=$1
deploy_dir=$2
port=$3
repo_url=$4

[[ $deploy_dir == /* ]] || { fail "deployDir must be absolute: $deploy_dir"; usage; }
if ! [[ $port =~ ^[0-9]{1,5}$ ]] || ((port < 1 || port > 65535)); then
  fail "invalid port: $port"
  usage
fi
[[ -n $repo_url && $repo_url != -* ]] || { fail "invalid repository URL"; usage; }
if [[ $branch == -* ]] || ! git check-ref-format --branch "$branch" >/dev/null 2>&1; then
  fail "invalid branch name"
  usage
fi

# Only ordinary transports: never ext:: or fd:: (which run commands), whatever the URL says.
export GIT_ALLOW_PROTOCOL='file:git:http:https:ssh'
export GIT_TERMINAL_PROMPT=0
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

service=${SERVICE_NAME:-$(service_name_for_branch "$branch")}
keep_releases=${KEEP_RELEASES:-5}
[[ $keep_releases =~ ^[1-9][0-9]*$ ]] || { fail "KEEP_RELEASES must be a positive integer"; exit 2; }

mkdir -p -- "$deploy_dir/deploys" "$deploy_dir/logs" "$deploy_dir/shared/src/content" "$deploy_dir/scripts"
take_lock "$deploy_dir" || { fail "another deploy of $deploy_dir holds the lock"; exit 3; }

previous=$(live_release_name "$deploy_dir")

# Debris of a deploy that was killed without running its trap: unfinished and not live.
for dir in "$deploy_dir"/deploys/*/; do
  name=$(basename -- "$dir")
  if [[ -d $dir && $name != "$previous" ]] && ! is_built_release "$dir"; then
    rm -rf -- "$dir"
  fi
done

# A fresh 14-digit release name; mkdir is the claim, so two deploys in one second get distinct names.
while :; do
  stamp=$(date -u +%Y%m%d%H%M%S)
  mkdir -- "$deploy_dir/deploys/$stamp" 2>/dev/null && break
  sleep 0.2
done
release_dir="$deploy_dir/deploys/$stamp"
build_log="$deploy_dir/logs/npm-build-$stamp.log"
stage=preparing

on_exit() {
  local rc=$?
  if [[ $stage == switched ]]; then
    log "restoring previous release ${previous:-(none)}"
    if [[ -n $previous ]]; then
      switch_live "$deploy_dir" "$previous"
      restart_service "$service" "$deploy_dir" "$port" || fail "restart of $service after restoring failed"
    else
      rm -f -- "$deploy_dir/live"
    fi
  fi
  if [[ $stage != confirmed ]]; then
    rm -rf -- "$release_dir"
    if [[ -s $build_log ]]; then
      fail "deploy of $branch failed (exit $rc); last lines of $build_log:"
      tail -n 20 -- "$build_log" >&2 || true
    fi
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

log "deploying $branch to $release_dir (service $service, port $port)"
git clone --quiet --depth 1 --single-branch --branch "$branch" -- "$repo_url" "$release_dir" >>"$build_log" 2>&1 ||
  { fail "git clone failed"; exit 4; }
commit=$(git -C "$release_dir" rev-parse HEAD)
printf '%s\n' "$commit" >"$release_dir/REVISION"
log "cloned $commit"

# The external content collection replaces whatever the site has at src/content.
site_dir=${SITE_DIR:-.}
if [[ $site_dir == /* || /$site_dir/ == */../* ]]; then
  fail "SITE_DIR must be a relative path inside the repository: $site_dir"
  exit 2
fi
mkdir -p -- "$release_dir/$site_dir/src"
rm -rf -- "$release_dir/$site_dir/src/content"
ln -s -- "$deploy_dir/shared/src/content" "$release_dir/$site_dir/src/content"

# Dependencies: identical lockfile, dependency fields and Node version → hard-link copy of the live release's
# node_modules (a copy, so nothing this release does can change the live one's tree; build caches
# are dropped because tools rewrite them in place). Otherwise `npm ci`, served from the npm cache.
# The key also covers package.json's dependency fields, so a package.json that no longer matches
# its lockfile still goes through `npm ci` (which refuses it) instead of reusing stale modules.
if [[ -f $release_dir/package-lock.json ]]; then
  deps_key=$({
    sha256sum <"$release_dir/package-lock.json"
    node --version
    node -e 'const p = require(process.argv[1]); const f = ["dependencies", "devDependencies", "optionalDependencies", "peerDependencies", "overrides"]; console.log(JSON.stringify(f.map((k) => p[k] ?? null)))' \
      "$release_dir/package.json"
  } | sha256sum | cut -d' ' -f1)
else
  deps_key=none
fi
previous_dir=${previous:+$deploy_dir/deploys/$previous}
if [[ $deps_key != none && -n $previous_dir && -f $previous_dir/.deps-key &&
  $(<"$previous_dir/.deps-key") == "$deps_key" ]]; then
  if [[ -d $previous_dir/node_modules ]]; then
    cp -al -- "$previous_dir/node_modules" "$release_dir/node_modules"
    rm -rf -- "$release_dir/node_modules/.cache" "$release_dir/node_modules/.vite" "$release_dir/node_modules/.astro"
  fi
  log "lockfile unchanged: reused dependencies of $previous"
else
  log "installing dependencies (npm ci)"
  (cd -- "$release_dir" && npm ci --prefer-offline --no-audit --no-fund) >>"$build_log" 2>&1 ||
    { fail "npm ci failed"; exit 5; }
fi
printf '%s\n' "$deps_key" >"$release_dir/.deps-key"

log "building"
(cd -- "$release_dir" && PORT="$port" npm run build) >>"$build_log" 2>&1 || { fail "build failed"; exit 6; }
mark_release_built "$release_dir"

switch_live "$deploy_dir" "$stamp"
stage=switched
log "live -> deploys/$stamp; restarting $service"
restart_service "$service" "$deploy_dir" "$port" >>"$build_log" 2>&1 || { fail "restart of $service failed"; exit 7; }
health_check "$port" || { fail "site on port $port did not answer after the restart"; exit 8; }
stage=confirmed

# Retention: the newest KEEP_RELEASES releases stay, and the live one always does.
mapfile -t releases < <(find "$deploy_dir/deploys" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort -r)
oldest_kept=$stamp
for i in "${!releases[@]}"; do
  name=${releases[$i]}
  if ((i < keep_releases)) || [[ $name == "$stamp" ]]; then
    oldest_kept=$name
    continue
  fi
  rm -rf -- "${deploy_dir:?}/deploys/$name"
done
# Build logs older than the oldest kept release belong to releases that are gone.
for file in "$deploy_dir"/logs/npm-build-*.log; do
  [[ -e $file ]] || continue
  name=${file##*/npm-build-}
  name=${name%.log}
  if [[ $name < $oldest_kept ]]; then
    rm -f -- "$file"
  fi
done

log "deployed $commit as deploys/$stamp"
printf 'release=%s commit=%s\n' "$stamp" "$commit"
