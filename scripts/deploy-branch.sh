#!/usr/bin/env bash
# Deploy one commit of a branch into a target directory as a new release, switch `live` to it
# atomically, restart the target's service and check that the site answers. On any failure the
# previous release stays (or is put back) live.
#
# Called by the webhook server (through services/webhook/src/deployments/invocation.ts, the one
# place that builds these arguments) and by operators (`npm run host -- deploy`):
#   scripts/deploy-branch.sh <branch> <deployDir> <port> <repoUrl> [<commit>]
#
# <commit> is the pushed commit (`after`); it is deployed exactly, never the branch head at clone
# time. It must be on the branch, and it must not be an ancestor of the live commit: an old or
# replayed push never rolls a target back (exit 9); rolling back is `npm run host -- rollback`.
# Without <commit> (a manual deploy) the branch head is deployed, whatever is live.
#
# Environment (all optional):
#   BUILD_USER, SITE_USER  isolation (both or neither; the script must then run as root): the
#                          build runs as BUILD_USER, the release is sealed (owned by root, not
#                          writable) and only SITE_USER's group may read it. See docs/webhook.md.
#   BUILD_ENV_ALLOW        extra variable names (space-separated) passed to the build besides the
#                          fixed allow-list (PATH, LANG, TZ, PORT, HOME and the npm settings)
#   KEEP_RELEASES          releases to keep, newest first; the live one is never deleted (5)
#   RESTART_COMMAND        command run as `$RESTART_COMMAND <service>`, split on spaces
#                          (sudo systemctl restart); it also gets DEPLOY_DIR, PORT, RELEASE_DIR, SITE_USER
#   SERVICE_NAME           unit to restart (astro- plus the target key with / as -, derived from the branch)
#   DEPLOY_LOG             this deploy's own log file (the webhook server's), pruned with its release
#   HEALTH_TIMEOUT_SECONDS how long the site may take to answer after the restart (30)
#   HEALTH_PATH            path requested for the health check; any status below 500 passes (/)
#   LOCK_WAIT_SECONDS      how long to wait for another deploy of the same target (900)
#   npm_config_cache       npm cache directory (<deployDir>/cache/npm, always that under isolation)
#   SITE_DIR               the site's folder inside the repository, relative (.); its src/content is the
#                          one replaced by the shared collection (services/web for the platform's own site).
#                          When that folder has its own package-lock.json, dependencies are installed and
#                          the site is built there (`npm ci`, `npm run build` in SITE_DIR), not at the root
#   DEPLOY_BUILD_SANDBOX   the sandbox of every build step: auto, systemd, bwrap or none (none); with
#                          DEPLOY_BUILD_TIMEOUT_SECONDS, _MEMORY_MAX, _TASKS_MAX, _CPU_QUOTA, _FILE_SIZE_MAX
#                          (limits) and _PROXY_SOCKET, _NETNS, _ALLOWED_ADDRESSES (the way to the
#                          registry), see scripts/host/lib/build-sandbox.sh and docs/webhook.md
#
# Exit codes:
#   0 deployed and live          1 unexpected error             2 usage (bad arguments or setup)
#   3 lock not obtained in time  4 git fetch failed             5 npm ci failed
#   6 build failed               7 restart failed, previous release restored
#   8 health check failed, previous release restored
#   9 refused: the commit is not on the branch, or is older than the live commit
#   (a build step that runs past DEPLOY_BUILD_TIMEOUT_SECONDS fails like any other: 4, 5 or 6)
#   130/143 interrupted (SIGINT/SIGTERM); the previous release stays or is put back live
set -euo pipefail
IFS=$'\n\t'

here=$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")
# shellcheck source-path=SCRIPTDIR
source "$here/host/lib/releases.sh"
# shellcheck source-path=SCRIPTDIR
source "$here/host/lib/build-sandbox.sh"

usage() {
  cat >&2 <<'EOF'
usage: deploy-branch.sh <branch> <deployDir> <port> <repoUrl> [<commit>]
  branch     the branch to deploy (e.g. main, feature/team-de1/map)
  deployDir  the target's absolute directory (DEPLOY_ROOT/<deployPath>)
  port       the port the target's site listens on
  repoUrl    the repository to fetch from
  commit     the pushed commit (40 or 64 hex digits); default: the branch head
EOF
  exit 2
}

(($# == 4 || $# == 5)) || usage
branch=$1
deploy_dir=$2
port=$3
repo_url=$4
wanted_commit=${5:-}

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
if [[ -n $wanted_commit ]] && ! [[ $wanted_commit =~ ^([0-9a-f]{40}|[0-9a-f]{64})$ ]]; then
  fail "invalid commit: 40 or 64 lower-case hex digits"
  usage
fi

build_user=${BUILD_USER:-}
site_user=${SITE_USER:-}
site_group=
build_group=
if [[ -n $build_user || -n $site_user ]]; then
  [[ -n $build_user && -n $site_user ]] || { fail "BUILD_USER and SITE_USER go together"; exit 2; }
  ((EUID == 0)) || { fail "isolation (BUILD_USER, SITE_USER) needs the deploy script to run as root"; exit 2; }
  for user in "$build_user" "$site_user"; do
    id -u -- "$user" >/dev/null 2>&1 || { fail "user $user does not exist; create it with: npm run host -- users --apply"; exit 2; }
  done
  # The site user's primary group is the target's group; the build user belongs to it too.
  site_group=$(id -gn -- "$site_user")
  build_group=$(id -gn -- "$build_user")
fi

# Only ordinary transports: never ext:: or fd:: (which run commands), whatever the URL says.
export GIT_ALLOW_PROTOCOL='file:git:http:https:ssh'
export GIT_TERMINAL_PROMPT=0
export GIT_CONFIG_NOSYSTEM=1

service=${SERVICE_NAME:-$(service_name_for_branch "$branch")}
keep_releases=${KEEP_RELEASES:-5}
[[ $keep_releases =~ ^[1-9][0-9]*$ ]] || { fail "KEEP_RELEASES must be a positive integer"; exit 2; }
extra_allowed=${BUILD_ENV_ALLOW:-}
[[ $extra_allowed =~ ^[A-Za-z_][A-Za-z0-9_\ ]*$|^$ ]] || { fail "BUILD_ENV_ALLOW is a space-separated list of variable names"; exit 2; }

prepare_target_dir "$deploy_dir" "$site_group"
if [[ -n $build_user ]] &&
  ! setpriv "--reuid=$build_user" "--regid=$build_group" --init-groups -- test -x "$deploy_dir/deploys"; then
  fail "the build user $build_user cannot reach $deploy_dir/deploys: every parent directory needs o+x (e.g. chmod 711)"
  exit 2
fi
take_lock "$deploy_dir" || { fail "another deploy of $deploy_dir holds the lock"; exit 3; }
step lock

# Leftovers of a deploy that was killed outright (SIGKILL): builds that left the process group.
[[ -z $build_user ]] || kill_processes_of "$build_user"

# A deploy killed outright (SIGKILL: no trap ran) after switching `live` but before the site
# answered leaves `live` at a release that was never confirmed. The release it replaced is
# recorded in .switch-pending from the switch until the confirmation, so put that one back first.
if [[ -f $deploy_dir/.switch-pending ]]; then
  replaced=$(<"$deploy_dir/.switch-pending")
  unconfirmed=$(live_release_name "$deploy_dir")
  if [[ -n $replaced && -d $deploy_dir/deploys/$replaced ]] && is_built_release "$deploy_dir/deploys/$replaced"; then
    switch_live "$deploy_dir" "$replaced" "$site_group"
    log "an interrupted deploy left deploys/${unconfirmed:-?} live unconfirmed; put deploys/$replaced back"
    restart_service "$service" "$deploy_dir" "$port" || fail "restart of $service after putting deploys/$replaced back failed"
  elif [[ -z $replaced ]]; then
    rm -f -- "$deploy_dir/live"
    log "an interrupted first deploy left deploys/${unconfirmed:-?} live unconfirmed; nothing is live now"
  fi
  [[ -z $unconfirmed || $unconfirmed == "$replaced" ]] || rm -rf -- "${deploy_dir:?}/deploys/$unconfirmed"
  rm -f -- "$deploy_dir/.switch-pending"
fi

previous=$(live_release_name "$deploy_dir")
previous_dir=${previous:+$deploy_dir/deploys/$previous}
live_commit=
if [[ -n $previous_dir ]] && ! live_commit=$(read_release_file "$previous_dir/REVISION" "$COMMIT_PATTERN"); then
  live_commit=
  log "the live release deploys/$previous records no commit id (a release sealed before REVISION was written after sealing); the older-than-live check is skipped"
fi

# Debris of a deploy that was killed without running its trap: unfinished and not live.
for dir in "$deploy_dir"/deploys/*/; do
  name=${dir%/}
  name=${name##*/}
  if [[ -d $dir && $name != "$previous" ]] && ! is_built_release "$dir"; then
    rm -rf -- "$dir"
  fi
done

# A fresh 14-digit release name; mkdir is the claim, so two deploys in one second get distinct names.
while :; do
  stamp=$(TZ=UTC printf '%(%Y%m%d%H%M%S)T' -1)
  mkdir -m 0700 -- "$deploy_dir/deploys/$stamp" 2>/dev/null && break
  sleep 0.2
done
release_dir="$deploy_dir/deploys/$stamp"
build_log="$deploy_dir/logs/npm-build-$stamp.log"
stage=preparing
step prepare

on_exit() {
  local rc=$?
  trap - TERM INT
  if [[ $stage == switched ]]; then
    log "restoring previous release ${previous:-(none)}"
    if [[ -n $previous ]]; then
      switch_live "$deploy_dir" "$previous" "$site_group"
      restart_service "$service" "$deploy_dir" "$port" || fail "restart of $service after restoring failed"
    else
      rm -f -- "$deploy_dir/live"
    fi
    rm -f -- "$deploy_dir/.switch-pending"
  fi
  # Nothing a build started outlives the deploy (a build may have left the process group).
  [[ -z $build_user ]] || kill_processes_of "$build_user"
  sandbox_cleanup
  [[ $stage == switched || $stage == confirmed ]] || rm -f -- "$deploy_dir/.switch-pending"
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

# The environment of every build step: this allow-list and nothing else (no secret, no token, no
# path to the secrets file can reach it, whatever the caller's environment holds).
build_home="$deploy_dir/cache/home"
# Under isolation every target has its own npm cache (a shared one would be a channel between teams).
npm_cache=${npm_config_cache:-$deploy_dir/cache/npm}
[[ -z $build_user ]] || npm_cache="$deploy_dir/cache/npm"
build_env=(
  "PATH=${PATH:-/usr/local/bin:/usr/bin:/bin}"
  "HOME=$build_home"
  "LANG=${LANG:-C.UTF-8}"
  "TZ=${TZ:-UTC}"
  "PORT=$port"
  "CI=true"
  "npm_config_cache=$npm_cache"
  "npm_config_update_notifier=false"
  "npm_config_fund=false"
  "npm_config_audit=false"
)
IFS=' ' read -r -a extra_names <<<"$extra_allowed"
for name in "${extra_names[@]}"; do
  [[ -v $name ]] && build_env+=("$name=${!name}")
done
# The sandbox's one way out, if the operator gave one: the proxy relay on the sandbox's own loopback.
if [[ -n ${DEPLOY_BUILD_PROXY_SOCKET:-} && ${DEPLOY_BUILD_SANDBOX:-none} != none ]]; then
  for name in npm_config_proxy npm_config_https_proxy http_proxy https_proxy; do
    build_env+=("$name=http://127.0.0.1:$SANDBOX_PROXY_PORT")
  done
fi

# Run a build step in the release directory as the build user, with the allow-listed environment
# only and without the lock descriptor (a build that outlives the script must not hold the lock),
# in the build sandbox (build-sandbox.sh; DEPLOY_BUILD_SANDBOX=none: setpriv alone).
# It runs in $build_dir: the release, or the site's folder when that has its own lockfile.
#   as_builder <step> [--online] <command>…   <step> names the step (export, probe, dependencies,
#   build); --online: it may reach the registry through DEPLOY_BUILD_PROXY_SOCKET.
build_dir=$release_dir
as_builder() {
  local step=$1 online=0 status=0
  shift
  if [[ $1 == --online ]]; then
    online=1
    shift
  fi
  sandbox_prefix "$build_dir" "$step" "$online"
  if [[ $sandbox_kind == none ]]; then
    (cd -- "$build_dir" && exec "${sandbox_cmd[@]}" env -i "${build_env[@]}" "$@") 9>&- || status=$?
    return "$status"
  fi
  # In the background (stdin kept: the export step reads the archive from it), watched for its disk.
  local step_pid watcher disk_flag="$deploy_dir/.disk-exceeded"
  rm -f -- "$disk_flag"
  (cd -- "$build_dir" && sandbox_enter && exec "${sandbox_cmd[@]}" env -i "${build_env[@]}" "$@") <&0 9>&- &
  step_pid=$!
  sandbox_watch_disk "$step_pid" "$disk_flag" </dev/null >/dev/null 2>&1 9>&- &
  watcher=$!
  wait "$step_pid" || status=$?
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  if [[ -s $disk_flag ]]; then
    fail "the $step step used $(<"$disk_flag") bytes of disk, more than DEPLOY_BUILD_DISK_MAX (${DEPLOY_BUILD_DISK_MAX:-4G}); it was stopped"
    rm -f -- "$disk_flag"
    return 1
  fi
  if ((status == 124)) && [[ $sandbox_kind == bwrap ]]; then
    fail "the $step step timed out after $sandbox_timeout s (DEPLOY_BUILD_TIMEOUT_SECONDS)"
  fi
  return "$status"
}

if [[ -n $build_user ]]; then
  # cache/ is the build's own for good: root changes the owner of that folder (in root's target
  # folder) and of nothing inside it. A link or a file the build left as cache/home or cache/npm is
  # removed (unlinking never follows it; no build process runs now, so nothing swaps it meanwhile),
  # and a missing one is made fresh by root, the only thing there root ever hands to the build.
  chown -h -- "$build_user:$build_group" "$deploy_dir/cache" "$release_dir"
  chmod 0700 -- "$deploy_dir/cache"
  for dir in "$build_home" "$deploy_dir/cache/npm"; do
    if [[ -L $dir || (-e $dir && ! -d $dir) ]]; then
      rm -f -- "$dir"
      log "${dir#"$deploy_dir"/} was not a folder; made a new one"
    fi
    if [[ ! -e $dir ]]; then
      mkdir -m 0700 -- "$dir"
      chown -h -- "$build_user:$build_group" "$dir"
    fi
  done
else
  mkdir -p -- "$build_home"
fi
sandbox_init "$deploy_dir" "$release_dir" "$service" "$build_user" "$build_group"

# The target's own mirror of the repository (never inside a release): fetching is incremental, and
# it answers whether the pushed commit is on the branch and whether it is older than live.
log "deploying $branch to $release_dir (service $service, port $port)"
fetch_branch "$deploy_dir/repo.git" "$repo_url" "$branch" >>"$build_log" 2>&1 || { fail "git fetch failed"; exit 4; }
head=$(git -C "$deploy_dir/repo.git" rev-parse --verify --quiet "refs/heads/$branch^{commit}") || { fail "git fetch failed"; exit 4; }
commit=${wanted_commit:-$head}
if ! git -C "$deploy_dir/repo.git" merge-base --is-ancestor "$commit" "$head" 2>/dev/null; then
  fail "commit $commit is not on branch $branch"
  exit 9
fi
if [[ -n $wanted_commit && -n $live_commit && $commit != "$live_commit" ]] &&
  git -C "$deploy_dir/repo.git" merge-base --is-ancestor "$commit" "$live_commit" 2>/dev/null; then
  fail "commit $commit is older than the live commit $live_commit; refusing to roll back (use: npm run host -- rollback)"
  exit 9
fi
step fetch

# A commit already live (a push that raced its own deploy, a replay): nothing to do, no restart.
if [[ -n $wanted_commit && $commit == "$live_commit" ]]; then
  rm -rf -- "$release_dir" "$build_log"
  stage=confirmed
  log "commit $commit is already live as deploys/$previous; nothing deployed"
  printf 'release=%s commit=%s\n' "$previous" "$commit"
  exit 0
fi

# The release is the commit's tree, without .git. REVISION (the commit) and .deploy-log (the
# server's log of this deploy) are written by root once the release is sealed, out of the build's reach.
git -C "$deploy_dir/repo.git" archive --format=tar "$commit" | as_builder export tar -x --no-same-owner -f - >>"$build_log" 2>&1 ||
  { fail "git archive failed"; exit 4; }
log "checked out $commit"
step export

# The external content collection replaces whatever the site has at src/content. The site's folder is
# a plain relative path, and no part of it may be a link the repository planted: root's mkdir, chown and
# ln below must never be led outside the release.
site_dir=${SITE_DIR:-.}
if [[ ! $site_dir =~ ^[A-Za-z0-9._/-]+$ || $site_dir == /* || /$site_dir/ == */../* ]]; then
  fail "SITE_DIR must be a relative path inside the repository: $site_dir"
  exit 2
fi
if ! is_plain_folder "$release_dir" "$site_dir"; then
  fail "SITE_DIR $site_dir is not a folder of the repository"
  exit 2
fi
site_root=$release_dir
IFS='/' read -r -a site_parts <<<"$site_dir"
for part in "${site_parts[@]}"; do
  [[ -z $part || $part == . ]] || site_root="$site_root/$part"
done
# First the link check, then the removal: rm -rf through a planted src link would delete outside.
if [[ -L $site_root/src || (-e $site_root/src && ! -d $site_root/src) ]]; then
  rm -f -- "$site_root/src" # a link named src must not lead root's rm, mkdir and chown elsewhere
fi
rm -rf -- "$site_root/src/content"
mkdir -p -- "$site_root/src"
[[ -z $build_user ]] || chown -h -- "$build_user:$build_group" "$site_root/src"
ln -s -- "$deploy_dir/shared/src/content" "$site_root/src/content"
step content

# A site folder with its own lockfile is a package of its own (services/web): only its dependencies are
# installed, in the folder, and it is built there. Otherwise the root package installs and builds.
deps_rel=
if [[ $site_root != "$release_dir" && -f $site_root/package-lock.json && ! -L $site_root/package-lock.json ]]; then
  deps_rel=${site_root#"$release_dir"}
  build_dir=$site_root
fi

# Dependencies: identical lockfile, dependency fields and Node version → hard links to the live
# release's node_modules. That release is sealed (files owned by root, not writable), so the new
# build can replace a linked file but never write into it: no release can change another. The
# directories are the new release's own (the build may add caches). Build caches are dropped,
# because tools rewrite them in place. Otherwise `npm ci`, served from the target's npm cache.
# One node start, as the build user (root never opens what the repository may have made a link)
# and within a time limit (package.json may be a FIFO), answers two questions: the dependency key
# (the lockfile's hash, the Node version and the dependency fields; `none` without a lockfile), and
# how to run the build. A package whose `build` is a plain script without prebuild/postbuild hooks
# is built the way `npm run build` would run it (sh -c with node_modules/.bin first on PATH, in the
# release), without starting npm itself, which costs ~0.6 s of a 2 s deploy; anything else goes
# through `npm run build`.
# shellcheck disable=SC2016 # the single quotes keep a JavaScript template literal from bash
probe=$(as_builder probe timeout --foreground 60 node -e '
  const { createHash } = require("node:crypto");
  const { existsSync, readFileSync } = require("node:fs");
  let p = {};
  try { p = JSON.parse(readFileSync("package.json", "utf8")); } catch {}
  let key = "none";
  if (existsSync("package-lock.json")) {
    const fields = ["dependencies", "devDependencies", "optionalDependencies", "peerDependencies", "overrides"].map((k) => p[k] ?? null);
    const parts = [createHash("sha256").update(readFileSync("package-lock.json")).digest("hex"), process.version, JSON.stringify(fields)];
    key = createHash("sha256").update(parts.join("\n")).digest("hex");
  }
  const scripts = p.scripts ?? {};
  const direct = typeof scripts.build === "string" && scripts.build.trim() !== "" && scripts.prebuild === undefined && scripts.postbuild === undefined;
  process.stdout.write(`${key}\n${direct ? "direct" : "npm"}\n${direct ? scripts.build : ""}`);') ||
  { fail "could not read package.json"; exit 6; }
deps_key=${probe%%$'\n'*}
probe=${probe#*$'\n'}
build_mode=${probe%%$'\n'*}
build_script=${probe#*$'\n'}
# The live release is sealed, but a build may have made its node_modules (or a folder on the way
# to it) a link before sealing: only a plain folder is copied, and always into a fresh target
# (-T; whatever the repository has as node_modules, a link to another team's release included, is
# removed first), so root's copy and its removal of the caches stay inside this release.
reuse=
previous_key=
[[ -z $previous_dir ]] || previous_key=$(read_release_file "$previous_dir/.deps-key" "$DEPS_KEY_PATTERN") || previous_key=
if [[ $deps_key != none && $previous_key == "$deps_key" ]]; then
  previous_modules=$previous_dir$deps_rel/node_modules
  if is_plain_folder "$previous_dir" "$deps_rel/node_modules"; then
    reuse=copy
  elif is_plain_folder "$previous_dir" "$deps_rel" && [[ ! -e $previous_modules && ! -L $previous_modules ]]; then
    reuse=nothing # the live release has no node_modules: nothing to install either
  fi
fi
if [[ -n $reuse ]]; then
  if [[ $reuse == copy ]]; then
    rm -rf -- "$build_dir/node_modules"
    cp -alT -- "$previous_modules" "$build_dir/node_modules"
    rm -rf -- "$build_dir/node_modules/.cache" "$build_dir/node_modules/.vite" "$build_dir/node_modules/.astro"
    [[ -z $build_user ]] || find "$build_dir/node_modules" -type d -exec chown -h -- "$build_user:$build_group" {} +
  fi
  log "lockfile unchanged: reused dependencies of $previous"
else
  log "installing dependencies (npm ci)"
  as_builder dependencies --online npm ci --prefer-offline --no-audit --no-fund >>"$build_log" 2>&1 || { fail "npm ci failed"; exit 5; }
  [[ -z $build_user ]] || kill_processes_of "$build_user"
fi
step dependencies

log "building"
if [[ $build_mode == direct ]]; then
  as_builder build --online env "PATH=$build_dir/node_modules/.bin:${PATH:-/usr/local/bin:/usr/bin:/bin}" npm_lifecycle_event=build \
    "npm_lifecycle_script=$build_script" sh -c "$build_script" >>"$build_log" 2>&1 || { fail "build failed"; exit 6; }
else
  as_builder build --online npm run build >>"$build_log" 2>&1 || { fail "build failed"; exit 6; }
fi
step build
[[ -z $build_user ]] || kill_processes_of "$build_user"
# The names root records go first, whatever the build made of them (a link, a FIFO, a folder), so a
# deploy killed while sealing never leaves them (a planted .release-built above all) behind. Once
# sealed, the release is root's and no build process runs: root creates them afresh (O_EXCL).
rm -rf -- "$release_dir/.release-built" "$release_dir/REVISION" "$release_dir/.deps-key" "$release_dir/.deploy-log"
seal_release "$release_dir" "$build_user"
create_release_file "$release_dir/REVISION" "$commit"
create_release_file "$release_dir/.deps-key" "$deps_key"
[[ -z ${DEPLOY_LOG:-} ]] || create_release_file "$release_dir/.deploy-log" "${DEPLOY_LOG##*/}"
mark_release_built "$release_dir"
step seal

# The note first, then the stage, then the switch: however the script is stopped from here on,
# either its trap (stage switched: put previous back, idempotent) or the next deploy (the note)
# undoes the switch.
write_release_file "$deploy_dir/.switch-pending" "$previous"
stage=switched
switch_live "$deploy_dir" "$stamp" "$site_group"
log "live -> deploys/$stamp; restarting $service"
restart_service "$service" "$deploy_dir" "$port" >>"$build_log" 2>&1 || { fail "restart of $service failed"; exit 7; }
step restart
health_check "$port" "$site_user" || { fail "the site did not answer as $service on port $port after the restart"; exit 8; }
step health
stage=confirmed
rm -f -- "$deploy_dir/.switch-pending"

close_other_releases "$deploy_dir" "$site_group"
prune_releases "$deploy_dir" "$stamp" "$keep_releases"
step prune

step_summary

log "deployed $commit as deploys/$stamp"
printf 'release=%s commit=%s\n' "$stamp" "$commit"
