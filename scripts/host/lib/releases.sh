# shellcheck shell=bash
# Release helpers shared by scripts/deploy-branch.sh and scripts/host/rollback.sh (sourced, never run).
#
# Layout of one target's directory (DEPLOY_ROOT/<deployPath>), with the modes used under isolation
# (BUILD_USER/SITE_USER set; <site> is the site user's group, of which the build user is a member):
#   .                            root:<site> 0750   nobody of another target gets in
#   deploys/                     root:<site> 0710   enter, not list
#   deploys/<YYYYMMDDHHMMSS>/    one release per deploy (the commit's tree, no .git): while building
#                                <build> 0700; once built owned by root, nothing writable by others;
#                                the live one root:<site> 0750, every other one root:root 0700
#   live -> deploys/<ts>         the active release; switched atomically, relative link
#   repo.git/                    the target's mirror of the repository (root 0700)
#   logs/                        npm-build-<ts>.log and the server's deploy-<ts>-<id>.log (root 0700)
#   cache/                       the build user's HOME and npm cache (<build> 0700)
#   shared/src/content/          external content collection, linked into every release (root:<site> 0750)
#   .deploy.lock                 flock(1) lock: one deploy or rollback at a time per target
#
# Invariants: `live` only ever points at a release whose build finished (marker .release-built);
# a release is only deleted when it is not live; a built release is never written again.
#
# Trust boundary (isolation): a build owns its release until it is sealed and owns cache/ for good,
# so anything there may be a link, a FIFO, a folder, a hard link or gigabytes where a file is
# expected. Root never follows a path the build can change: it writes REVISION, .deps-key,
# .deploy-log and .release-built only after sealing (no build process runs then, and the release is
# root's), reads them with read_release_file, checks each folder on a path it copies from with
# is_plain_folder, copies into fresh targets only (cp -T), and changes the owner of cache/ itself and
# of folders it has just made, never of anything else there (chown -h).

# The values root records in a release, as extended regular expressions of the whole content.
# shellcheck disable=SC2034 # used by the scripts that source this file
COMMIT_PATTERN='[0-9a-f]{40}|[0-9a-f]{64}'
DEPS_KEY_PATTERN='[0-9a-f]{64}|none'
DEPLOY_LOG_PATTERN='deploy-[0-9]{14}-[A-Za-z0-9-]{1,100}[.]log'

# Marker written into a release once it is built and sealed; releases without it are debris of an
# interrupted deploy and may be removed by the next deploy. Only root's marker in root's release
# counts: a build can plant a file of that name in the release it owns, and a deploy killed before
# sealing must not leave that release looking built (and unsealed) for a rollback to put live.
mark_release_built() { create_release_file "$1/.release-built" built; }
is_built_release() {
  local dir=${1%/}
  [[ -d $dir && ! -L $dir && -O $dir && -f $dir/.release-built && ! -L $dir/.release-built && -O $dir/.release-built ]]
}

# Create a file in a root-owned folder where the name does not exist (noclobber: O_EXCL, so never
# through a link); no process of its own.
create_release_file() {
  local status=0
  set -o noclobber
  printf '%s\n' "$2" >"$1" || status=$?
  set +o noclobber
  return "$status"
}

# Write a file without following a link at its name: whatever has the name is removed first.
write_release_file() {
  rm -rf -- "$1"
  create_release_file "$@"
}

# Print a value root wrote into a release (REVISION, .deps-key, .deploy-log) without trusting the
# release, which may be one sealed before these files were written after sealing: only a regular
# file, opened without following a link (O_NOFOLLOW) or waiting for a FIFO's writer (O_NONBLOCK),
# at most 257 bytes of it, within 5 seconds; printed only when the whole content matches the
# extended regular expression <pattern>. Status 1 (nothing printed) otherwise.
read_release_file() {
  local file=$1 pattern=$2 value
  [[ -f $file && ! -L $file ]] || return 1
  value=$(timeout --foreground 5 dd "if=$file" iflag=nofollow,nonblock bs=257 count=1 status=none 2>/dev/null) || return 1
  [[ $value =~ ^($pattern)$ ]] || return 1
  printf '%s\n' "$value"
}

# True when <base>/<relative> is a folder reached without any link: each part of <relative> is a
# folder of its own, not a link a build left to lead root elsewhere.
is_plain_folder() {
  local path=$1 part
  local -a parts
  IFS='/' read -r -a parts <<<"$2"
  for part in "${parts[@]}"; do
    [[ -z $part || $part == . ]] && continue
    path="$path/$part"
    [[ -d $path && ! -L $path ]] || return 1
  done
}

# printf's own clock: no `date` process per log line.
log() { TZ=UTC printf '%(%Y-%m-%dT%H:%M:%SZ)T %s\n' -1 "$*"; }
fail() { log "error: $*" >&2; }

# Step timings of a deploy, from bash's own clock (no process per step): `step <name>` records
# the time since the previous step; `step_summary` prints them on one log line.
step_started=${EPOCHREALTIME/[.,]/}
step_times=()
step() {
  local now=${EPOCHREALTIME/[.,]/}
  step_times+=("$1=$(((now - step_started) / 1000))ms")
  step_started=$now
}
step_summary() {
  local IFS=' '
  log "timings: ${step_times[*]}"
}

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

# The target's directories, with the isolation modes when <site group> is given.
prepare_target_dir() {
  local deploy_dir=$1 site_group=$2
  mkdir -p -- "$deploy_dir/deploys" "$deploy_dir/logs" "$deploy_dir/shared/src/content" "$deploy_dir/cache"
  [[ -n $site_group ]] || return 0
  chown -- "root:$site_group" "$deploy_dir" "$deploy_dir/deploys" "$deploy_dir/shared" "$deploy_dir/shared/src" "$deploy_dir/shared/src/content"
  chmod 0750 -- "$deploy_dir" "$deploy_dir/shared" "$deploy_dir/shared/src" "$deploy_dir/shared/src/content"
  chmod 0710 -- "$deploy_dir/deploys"
  chown -- root:root "$deploy_dir/logs"
  chmod 0700 -- "$deploy_dir/logs"
}

# End every process of a (build) user: a build that left the deploy's process group (setsid,
# double fork) must not outlive its deploy. Only ever called for a target's own build user.
kill_processes_of() {
  local user=$1 i
  pgrep -U "$user" >/dev/null 2>&1 || return 0 # the usual case: one look at /proc
  pkill -KILL -U "$user" 2>/dev/null || true
  for i in $(seq 100); do
    pgrep -U "$user" >/dev/null 2>&1 || return 0
    sleep 0.05
    pkill -KILL -U "$user" 2>/dev/null || true
  done
  fail "processes of $user are still running after SIGKILL (attempt $i)"
}

# Fetch one branch into the target's bare mirror (created on first use).
fetch_branch() {
  local mirror=$1 url=$2 branch=$3
  [[ -d $mirror ]] || git init --quiet --bare "$mirror"
  chmod 0700 -- "$mirror"
  git -C "$mirror" fetch --quiet --no-tags --force "$url" "+refs/heads/$branch:refs/heads/$branch"
}

# Under isolation: the built release becomes root's and read-only for everyone else, so neither a
# later build (which shares its dependency files through hard links) nor the site can change it.
# Call it when no process of the build user runs any more.
seal_release() {
  local release_dir=$1 build_user=$2
  [[ -n $build_user ]] || return 0
  # One walk over what the build owns (GNU find's comma operator): nothing writable by group or
  # others and nothing set-id, and owned by root (-h: a link itself, never what it points at).
  # Only the build's own files: anything else in the release is root's already (hard links to the
  # sealed live release), or a file of someone else the build hard-linked into it — which a kernel
  # without fs.protected_hardlinks allows, e.g. a set-uid program — and that stays as it is.
  find "$release_dir" -user "$build_user" \( \( ! -type l -perm /6022 -exec chmod go-w,ug-s {} + \) , -exec chown -h 0:0 {} + \)
  chown -h 0:0 "$release_dir"
  chmod 0700 "$release_dir"
}

# Release directory name the `live` link points at, or nothing when there is no live release.
live_release_name() {
  local deploy_dir=$1 target
  [[ -L $deploy_dir/live ]] || return 0
  target=$(readlink -- "$deploy_dir/live" 2>/dev/null) || return 0
  printf '%s\n' "${target##*/}"
}

# Point `live` at deploys/<name> atomically: a new link under a temporary name, then rename(2)
# over the old one (mv -T), so readers see either the old or the new release, never no link.
# Under isolation the release is opened to the site's group first.
switch_live() {
  local deploy_dir=$1 name=$2 site_group=${3:-}
  local tmp_link="$deploy_dir/.live.tmp.$$"
  if [[ -n $site_group ]]; then
    chgrp -- "$site_group" "$deploy_dir/deploys/$name"
    chmod 0750 -- "$deploy_dir/deploys/$name"
  fi
  ln -sfn -- "deploys/$name" "$tmp_link"
  mv -T -- "$tmp_link" "$deploy_dir/live"
}

# Under isolation, once a release is confirmed live: the site may read that release only.
close_other_releases() {
  local deploy_dir=$1 site_group=$2 live dir name
  local -a others=()
  [[ -n $site_group ]] || return 0
  live=$(live_release_name "$deploy_dir")
  for dir in "$deploy_dir"/deploys/*/; do
    name=${dir%/}
    name=${name##*/}
    [[ -d $dir && $name != "$live" ]] || continue
    is_built_release "$dir" || continue
    others+=("${dir%/}")
  done
  ((${#others[@]})) || return 0
  chown 0:0 -- "${others[@]}"
  chmod 0700 -- "${others[@]}"
}

# Retention after a confirmed deploy: the newest <keep> releases stay, and the live one always
# does. Build logs and the server's deploy logs go with the releases they belong to: a log older
# than the oldest kept release is removed (failed deploys have no release; they go the same way).
prune_releases() {
  local deploy_dir=$1 live=$2 keep=$3 name i oldest_kept=$2 cutoff file
  local -a releases
  local -a names=()
  for file in "$deploy_dir"/deploys/*/; do
    [[ -d $file ]] || continue
    name=${file%/}
    names+=("${name##*/}")
  done
  # Glob order is sorted (release names are fixed-width timestamps); newest first.
  releases=()
  for ((i = ${#names[@]} - 1; i >= 0; i--)); do releases+=("${names[$i]}"); done
  for i in "${!releases[@]}"; do
    name=${releases[$i]}
    if ((i < keep)) || [[ $name == "$live" ]]; then
      oldest_kept=$name
      continue
    fi
    rm -rf -- "${deploy_dir:?}/deploys/$name"
  done
  for file in "$deploy_dir"/logs/npm-build-*.log; do
    [[ -e $file ]] || continue
    name=${file##*/npm-build-}
    name=${name%.log}
    if [[ $name < $oldest_kept ]]; then
      rm -f -- "$file"
    fi
  done
  # Deploy logs are named deploy-<start stamp>-<id>.log; the oldest kept release names its own
  # (written by root after sealing; a name that is not a deploy log's leaves the release's own stamp).
  cutoff=$oldest_kept
  if name=$(read_release_file "$deploy_dir/deploys/$oldest_kept/.deploy-log" "$DEPLOY_LOG_PATTERN") &&
    [[ $name =~ ^deploy-([0-9]{14})- && ${BASH_REMATCH[1]} < $oldest_kept ]]; then
    cutoff=${BASH_REMATCH[1]}
  fi
  for file in "$deploy_dir"/logs/deploy-*.log; do
    [[ -e $file ]] || continue
    name=${file##*/deploy-}
    if [[ ${name:0:14} =~ ^[0-9]{14}$ && ${name:0:14} < $cutoff ]]; then
      rm -f -- "$file"
    fi
  done
}

# Run $RESTART_COMMAND <service>, split on spaces (no shell, no quoting), with DEPLOY_DIR, PORT,
# RELEASE_DIR and SITE_USER in its environment for restart commands that are not systemd. The lock
# descriptor is closed for it: a site process started by the command must not inherit (and hold) the lock.
restart_service() {
  local service=$1 deploy_dir=$2 port=$3
  local -a restart_cmd
  IFS=' ' read -r -a restart_cmd <<<"${RESTART_COMMAND:-sudo systemctl restart}"
  DEPLOY_DIR="$deploy_dir" PORT="$port" RELEASE_DIR="$deploy_dir/live" SITE_USER="${SITE_USER:-}" "${restart_cmd[@]}" "$service" 9>&-
}

# Wait until the site answers HTTP on 127.0.0.1:<port> with a status below 500. Each try is bash's
# own /dev/tcp connection (no curl process per poll), in a subshell so a site that accepts but
# never answers cannot hold the check past its 2 s per try.
# With <site user> (isolation) an answer counts only from the site: every listener on the port must
# be that user's (listeners_owned_by); a listener of anyone else (another team's site that took the
# port while this one restarted) fails the check at once, whatever it answers. Status 1 otherwise.
health_check() {
  local port=$1 site_user=${2:-} timeout=${HEALTH_TIMEOUT_SECONDS:-30} path=${HEALTH_PATH:-/} site_uid=
  local deadline=$((SECONDS + timeout))
  if [[ -n $site_user ]]; then
    site_uid=$(id -u -- "$site_user") || { fail "site user $site_user does not exist"; return 1; }
  fi
  while ((SECONDS < deadline)); do
    if http_status_below_500 "$port" "$path" 9>&-; then
      [[ -z $site_uid ]] && return 0
      listeners_owned_by "$port" "$site_uid" "$site_user" && return 0
      return 1
    fi
    sleep 0.02
  done
  fail "site on port $port did not answer within ${timeout} s"
  return 1
}

# True when every TCP socket listening on <port> (IPv4 and IPv6, any address) belongs to <uid> or
# to root, and there is one. A socket's owner is the effective user that created it, as the kernel
# records it (the uid column of /proc/net/tcp{,6}); no other user can make a socket look like the
# site user's. Root is accepted because a root process answering for a site is the platform's own
# (infra/builder answers the check for a site container it reaches over a control socket); another
# team's site never runs as root. Reads this network namespace's tables with one grep.
listeners_owned_by() {
  local port=$1 uid=$2 name=$3 hex line owner found=0
  local -a fields
  printf -v hex '%04X' "$port"
  # sl local_address rem_address st …: LISTEN is state 0A.
  while IFS= read -r line; do
    IFS=' ' read -r -a fields <<<"$line"
    [[ ${fields[1]:-} == *:"$hex" && ${fields[3]:-} == 0A ]] || continue
    owner=${fields[7]:-}
    if [[ $owner != "$uid" && $owner != 0 ]]; then
      fail "port $port is held by uid $owner ($(id -nu -- "$owner" 2>/dev/null || echo unknown user)), not by the site user $name: another site answered in its place"
      return 1
    fi
    found=1
  done < <(grep -hE "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:[0-9A-F]+ 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  ((found)) || { fail "nothing listens on port $port in this network namespace, yet it answered"; return 1; }
}

# One HTTP/1.0 GET of <path> on 127.0.0.1:<port>: succeeds when the status line says 1xx–4xx.
http_status_below_500() {
  local port=$1 path=$2 line
  (
    exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$path" "$port" >&3
    IFS= read -r -t 2 line <&3 || exit 1
    [[ $line =~ ^HTTP/[0-9.]+\ [1-4][0-9][0-9] ]]
  ) 2>/dev/null
}

# Take the per-target lock on file descriptor 9, waiting up to LOCK_WAIT_SECONDS (default 900).
take_lock() {
  local deploy_dir=$1
  exec 9>"$deploy_dir/.deploy.lock"
  flock -w "${LOCK_WAIT_SECONDS:-900}" 9
}
