# shellcheck shell=bash
# The build's sandbox (sourced by scripts/deploy-branch.sh, never run). Every build step — the export
# (tar), the package probe, `npm ci` and the build — runs as the target's build user in a sandbox of
# its own, chosen by DEPLOY_BUILD_SANDBOX:
#   systemd  a transient unit per step: systemd-run --wait --pipe --collect with the site units'
#            sandbox (team-code-sandbox.conf, the one list) plus the build's paths, network and limits
#   bwrap    bubblewrap, started as the build user: --unshare-all (its own user, mount, pid, network,
#            IPC, UTS and cgroup namespaces), --die-with-parent, --new-session, no user namespace
#            inside; limits from rlimits, a timeout and, where the deploy may make them, cgroups
#   auto     systemd where systemd is PID 1 (/run/systemd/system) and the script runs as root, else
#            bwrap where installed; neither: exit 2 (a missing sandbox never means an unsandboxed build)
#   none     (default of the script; refused by the webhook server in production) setpriv alone, the
#            path before the sandbox: the users' file modes are the only boundary
#
# What a sandboxed step sees: the toolchain read-only (/usr and the merged-/usr links, a few files of
# /etc: users, name service, time zone, certificates; node's installation when it lives outside
# /usr), its release (the folder being built) and its target's cache/ (HOME and the npm cache)
# read-write, its target's shared content read-only, a /tmp, /dev/shm and /proc of its own, and
# nothing else: not the platform's checkout, not another target, not the secrets or
# /etc/webhook-server. Its network namespace holds its own loopback only, so the platform's loopback
# ports (webhook, API, database) are out of reach. The one way out an operator may add:
#   DEPLOY_BUILD_PROXY_SOCKET  a Unix socket of an HTTP(S) proxy to the package registry (e.g.
#       infra/egress behind a socket, or any CONNECT proxy listening on one; the build user must be
#       able to connect to it). The socket is bound into the sandbox and build-proxy-relay.mjs offers
#       it on 127.0.0.1:3128 inside, for `npm ci` and the build; npm_config_proxy,
#       npm_config_https_proxy, http_proxy and https_proxy point there. The proxy decides where a
#       connection may go.
#   DEPLOY_BUILD_NETNS (bwrap)  a network namespace the operator made (/run/netns/<name>: e.g. a
#       veth to a registry mirror, or nftables letting only the registry out): the step joins it
#       (--share-net) instead of getting an empty one.
#   DEPLOY_BUILD_ALLOWED_ADDRESSES (systemd)  addresses (CIDR) the step may reach from the host's
#       network namespace (IPAddressAllow=; everything else, loopback included, is denied) instead of
#       a private network namespace.
# Limits (each step): DEPLOY_BUILD_TIMEOUT_SECONDS (600; RuntimeMaxSec= or timeout(1)),
# DEPLOY_BUILD_MEMORY_MAX (2G; MemoryMax= or the memory cgroup), DEPLOY_BUILD_TASKS_MAX (512
# processes and threads; TasksMax= or RLIMIT_NPROC of the build user and the pids cgroup),
# DEPLOY_BUILD_CPU_QUOTA (200%; CPUQuota= or the cpu cgroup), DEPLOY_BUILD_FILE_SIZE_MAX (1G per
# file; LimitFSIZE= or RLIMIT_FSIZE), DEPLOY_BUILD_DISK_MAX (4G: the release and the target's
# cache/ together, measured every 2 s while a step runs, by du as the build user; past it the step is
# killed and the deploy fails). bwrap without a cgroup the deploy may make (cgroup v2 without
# delegation, not root) keeps the rlimits and the timeout and logs that memory and CPU are unbounded.

# The port build-proxy-relay.mjs listens on inside a sandbox's own network namespace.
SANDBOX_PROXY_PORT=3128
# This folder (scripts/host/lib, sourced by an absolute path) and the platform's checkout above it.
sandbox_lib=${BASH_SOURCE[0]%/*}
sandbox_platform=${sandbox_lib%/scripts/host/lib}

sandbox_kind=none
sandbox_cmd=()
sandbox_cgroups=()

# Bytes of a size given as systemd writes it (512M, 2G, 1048576); status 1 when it is not one.
sandbox_bytes() {
  local value=$1 number unit
  [[ $value =~ ^([1-9][0-9]{0,15})([KMGT]?)$ ]] || return 1
  number=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[2]}
  case $unit in
    K) number=$((number << 10)) ;;
    M) number=$((number << 20)) ;;
    G) number=$((number << 30)) ;;
    T) number=$((number << 40)) ;;
  esac
  printf '%s\n' "$number"
}

# The first <name> on PATH that is an executable file, like `command -v` for a program, into
# sandbox_found (no command substitution: no process).
sandbox_which() {
  local dir
  local -a dirs
  sandbox_found=
  IFS=: read -r -a dirs <<<"${PATH:-/usr/bin:/bin}"
  for dir in "${dirs[@]}"; do
    [[ -n $dir && -f $dir/$1 && -x $dir/$1 ]] || continue
    sandbox_found=$dir/$1
    return 0
  done
  return 1
}

# Read and check the settings and choose the sandbox (sandbox_kind). Exit 2 on a bad setting or
# when the chosen sandbox cannot run here. Arguments: the target's directory, its release, the unit
# name of its site (for the build units' names) and the build user and group ('' without isolation).
sandbox_init() {
  sandbox_deploy_dir=$1
  sandbox_release_dir=$2
  sandbox_service=$3
  sandbox_user=$4
  sandbox_group=$5
  local wanted=${DEPLOY_BUILD_SANDBOX:-none}
  case $wanted in
    none) sandbox_kind=none ;;
    systemd | bwrap) sandbox_kind=$wanted ;;
    auto)
      if [[ -d /run/systemd/system ]] && ((EUID == 0)) && command -v systemd-run >/dev/null; then
        sandbox_kind=systemd
      elif command -v bwrap >/dev/null; then
        sandbox_kind=bwrap
      else
        fail "DEPLOY_BUILD_SANDBOX=auto: no sandbox here (systemd is not PID 1 and bwrap is not installed: apt-get install bubblewrap)"
        exit 2
      fi
      ;;
    *)
      fail "DEPLOY_BUILD_SANDBOX must be auto, systemd, bwrap or none: $wanted"
      exit 2
      ;;
  esac
  [[ $sandbox_kind != none ]] || return 0

  if ((EUID == 0)) && [[ -z $sandbox_user ]]; then
    fail "DEPLOY_BUILD_SANDBOX=$sandbox_kind as root needs a build user to run the build as (BUILD_USER and SITE_USER, DEPLOY_ISOLATION=users)"
    exit 2
  fi
  sandbox_timeout=${DEPLOY_BUILD_TIMEOUT_SECONDS:-600}
  sandbox_tasks=${DEPLOY_BUILD_TASKS_MAX:-512}
  sandbox_cpu=${DEPLOY_BUILD_CPU_QUOTA:-200%}
  [[ $sandbox_timeout =~ ^[1-9][0-9]{0,6}$ ]] || { fail "DEPLOY_BUILD_TIMEOUT_SECONDS must be a positive number of seconds"; exit 2; }
  [[ $sandbox_tasks =~ ^[1-9][0-9]{0,6}$ ]] || { fail "DEPLOY_BUILD_TASKS_MAX must be a positive integer"; exit 2; }
  [[ $sandbox_cpu =~ ^([1-9][0-9]{0,4})%$ ]] || { fail "DEPLOY_BUILD_CPU_QUOTA must be a percentage of one CPU (200%)"; exit 2; }
  sandbox_cpu_percent=${BASH_REMATCH[1]}
  sandbox_memory=$(sandbox_bytes "${DEPLOY_BUILD_MEMORY_MAX:-2G}") || { fail "DEPLOY_BUILD_MEMORY_MAX must be a size (2G, 512M)"; exit 2; }
  sandbox_fsize=$(sandbox_bytes "${DEPLOY_BUILD_FILE_SIZE_MAX:-1G}") || { fail "DEPLOY_BUILD_FILE_SIZE_MAX must be a size (1G, 64M)"; exit 2; }
  ((sandbox_fsize >= 1024)) || { fail "DEPLOY_BUILD_FILE_SIZE_MAX must be at least 1K"; exit 2; }
  sandbox_disk=$(sandbox_bytes "${DEPLOY_BUILD_DISK_MAX:-4G}") || { fail "DEPLOY_BUILD_DISK_MAX must be a size (4G, 512M)"; exit 2; }
  ((sandbox_disk >= 1048576)) || { fail "DEPLOY_BUILD_DISK_MAX must be at least 1M"; exit 2; }
  sandbox_proxy_socket=${DEPLOY_BUILD_PROXY_SOCKET:-}
  if [[ -n $sandbox_proxy_socket && ! ($sandbox_proxy_socket == /* && -S $sandbox_proxy_socket) ]]; then
    fail "DEPLOY_BUILD_PROXY_SOCKET must be the absolute path of a Unix socket: $sandbox_proxy_socket"
    exit 2
  fi
  sandbox_netns=${DEPLOY_BUILD_NETNS:-}
  if [[ -n $sandbox_netns && ! ($sandbox_kind == bwrap && $sandbox_netns == /* && -e $sandbox_netns && $EUID == 0) ]]; then
    fail "DEPLOY_BUILD_NETNS is the absolute path of a network namespace (/run/netns/<name>), for DEPLOY_BUILD_SANDBOX=bwrap as root"
    exit 2
  fi
  sandbox_allowed=${DEPLOY_BUILD_ALLOWED_ADDRESSES:-}
  if [[ -n $sandbox_allowed && ! ($sandbox_kind == systemd && $sandbox_allowed =~ ^[0-9A-Fa-f.:/\ ]+$) ]]; then
    fail "DEPLOY_BUILD_ALLOWED_ADDRESSES is a space-separated list of addresses or CIDR prefixes, for DEPLOY_BUILD_SANDBOX=systemd"
    exit 2
  fi
  sandbox_which node || { fail "node is not installed"; exit 2; }
  sandbox_node=$sandbox_found
  sandbox_relay="$sandbox_lib/build-proxy-relay.mjs"
  sandbox_content="$sandbox_deploy_dir/shared/src/content"
  # The npm cache is cache/npm under isolation; without it the caller may name another one.
  sandbox_npm_cache=
  if [[ -n ${npm_config_cache:-} && -z $sandbox_user && $npm_config_cache == /* && $npm_config_cache != "$sandbox_deploy_dir/cache"/* ]]; then
    mkdir -p -- "$npm_config_cache"
    sandbox_npm_cache=$npm_config_cache
  fi

  if [[ $sandbox_kind == systemd ]]; then
    ((EUID == 0)) || { fail "DEPLOY_BUILD_SANDBOX=systemd needs the deploy script to run as root"; exit 2; }
    command -v systemd-run >/dev/null || { fail "DEPLOY_BUILD_SANDBOX=systemd: systemd-run is not installed"; exit 2; }
    local path
    for path in "$sandbox_release_dir" "$sandbox_deploy_dir" "$sandbox_npm_cache" "$sandbox_proxy_socket"; do
      [[ $path != *[[:space:]]* ]] || { fail "DEPLOY_BUILD_SANDBOX=systemd: a path with white space cannot be a unit property: $path"; exit 2; }
    done
    mapfile -t sandbox_properties < <(grep -Ev '^[[:space:]]*(#|$)' "$sandbox_lib/team-code-sandbox.conf")
  else
    sandbox_bwrap_init
  fi
  local network="a network namespace of its own with nothing but loopback"
  [[ -z $sandbox_proxy_socket ]] || network="$network, the registry through the proxy socket $sandbox_proxy_socket"
  [[ -z $sandbox_netns ]] || network="the network namespace $sandbox_netns"
  [[ -z $sandbox_allowed ]] || network="the addresses $sandbox_allowed only"
  log "build sandbox: $sandbox_kind; each step at most ${sandbox_timeout} s, memory ${DEPLOY_BUILD_MEMORY_MAX:-2G}, $sandbox_tasks tasks, CPU $sandbox_cpu, files of ${DEPLOY_BUILD_FILE_SIZE_MAX:-1G}, disk ${DEPLOY_BUILD_DISK_MAX:-4G}; network: $network"
}

# The parts of bwrap's command line that are the same for every step, the check that bwrap can make
# its namespaces as the build user here, and the cgroups of the build.
sandbox_bwrap_init() {
  command -v bwrap >/dev/null || { fail "DEPLOY_BUILD_SANDBOX=bwrap: bwrap is not installed (apt-get install bubblewrap)"; exit 2; }
  local path tool prefix probe_error
  sandbox_drop=()
  [[ -z $sandbox_user ]] || sandbox_drop=(setpriv "--reuid=$sandbox_user" "--regid=$sandbox_group" --init-groups --no-new-privs --)
  # --as-pid-1: the step itself is the namespace's first process, so bwrap waits for it (no reaper
  # of bwrap's own is left as a zombie for init to collect), and everything else in the namespace
  # ends with it.
  sandbox_bwrap=(bwrap --unshare-all --unshare-user --disable-userns --die-with-parent --new-session --as-pid-1)
  # The user namespace of the sandbox is the last one: a build makes no namespace of its own (bwrap
  # older than 0.8 cannot say so; then seccomp-free nesting stays possible and the log says so).
  if ! probe_error=$("${sandbox_drop[@]}" "${sandbox_bwrap[@]}" --ro-bind / / true 2>&1 9>&-); then
    sandbox_bwrap=(bwrap --unshare-all --unshare-user --die-with-parent --new-session --as-pid-1)
    if ! probe_error=$("${sandbox_drop[@]}" "${sandbox_bwrap[@]}" --ro-bind / / true 2>&1 9>&-); then
      fail "DEPLOY_BUILD_SANDBOX=bwrap: bwrap cannot make a sandbox as ${sandbox_user:-$(id -un)} here (unprivileged user namespaces disabled?): $probe_error"
      exit 2
    fi
    log "bwrap cannot forbid user namespaces inside the sandbox (--disable-userns needs bwrap 0.8)"
  fi
  [[ -z $sandbox_netns ]] || sandbox_bwrap+=(--share-net)
  # /tmp first: the target's folders may lie below it and are bound over the fresh one.
  sandbox_bwrap+=(--tmpfs /tmp --dev /dev --tmpfs /dev/shm --proc /proc --ro-bind /usr /usr)
  # Merged /usr (/bin -> usr/bin, …) as links again, anything else as the folder it is.
  for path in /bin /sbin /lib /lib32 /lib64 /libx32; do
    if [[ -L $path && $path -ef /usr$path ]]; then
      sandbox_bwrap+=(--symlink "usr$path" "$path")
    elif [[ -d $path ]]; then
      sandbox_bwrap+=(--ro-bind "$path" "$path")
    fi
  done
  for path in passwd group nsswitch.conf hosts host.conf resolv.conf gai.conf localtime ld.so.cache ld.so.conf ld.so.conf.d ssl ca-certificates alternatives; do
    sandbox_bwrap+=(--ro-bind-try "/etc/$path" "/etc/$path")
  done
  # node (and npm, git) installed outside /usr (e.g. /opt/node): its installation, read-only. Found
  # on PATH by bash itself (no process per tool on the usual host, where they are in /usr/bin).
  for tool in node npm git; do
    sandbox_which "$tool" || continue
    [[ $sandbox_found != /usr/* ]] || continue
    path=$(readlink -f -- "$sandbox_found")
    prefix=${path%/bin/*}
    [[ $prefix == /usr || $prefix == /usr/* || $prefix == "$path" || ! -d $prefix ]] || sandbox_bwrap+=(--ro-bind "$prefix" "$prefix")
  done
  sandbox_bwrap+=(--bind "$sandbox_release_dir" "$sandbox_release_dir" --bind "$sandbox_deploy_dir/cache" "$sandbox_deploy_dir/cache")
  sandbox_bwrap+=(--ro-bind "$sandbox_content" "$sandbox_content")
  [[ -z $sandbox_npm_cache ]] || sandbox_bwrap+=(--bind "$sandbox_npm_cache" "$sandbox_npm_cache")
  if [[ -n $sandbox_proxy_socket ]]; then
    sandbox_bwrap+=(--bind "$sandbox_proxy_socket" /run/build-proxy.sock --ro-bind "$sandbox_relay" /run/build-proxy-relay.mjs)
  fi
  sandbox_cgroup_init
}

# cgroups for the memory, CPU and pids limits of the build, below the deploy script's own (cgroup v1
# controllers, or cgroup v2 where this script may enable controllers there). Best effort: where
# none can be made the log says so and the build keeps its rlimits and timeout.
sandbox_cgroup_init() {
  sandbox_cgroups=()
  ((EUID == 0)) || { log "no cgroup limits (not root): memory and CPU of the build are unbounded"; return 0; }
  local name="deploy-build-$sandbox_service" controllers own dir quota=$((sandbox_cpu_percent * 1000))
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    own=$(sed -n 's/^0:://p' /proc/self/cgroup)
    dir=/sys/fs/cgroup${own%/}/$name
    # v2: controllers are enabled for children only where no process lives (the root excepted), so
    # this works where the script runs in the root cgroup or in one delegated with them enabled.
    printf '+memory +pids +cpu\n' >"/sys/fs/cgroup${own%/}/cgroup.subtree_control" 2>/dev/null || true
    if { [[ -d $dir ]] || mkdir -- "$dir"; } 2>/dev/null &&
      printf '%s\n' "$sandbox_memory" >"$dir/memory.max" 2>/dev/null &&
      printf '%s\n' "$sandbox_tasks" >"$dir/pids.max" 2>/dev/null &&
      printf '%s 100000\n' "$quota" >"$dir/cpu.max" 2>/dev/null; then
      sandbox_cgroups+=("$dir")
    else
      [[ ! -d $dir ]] || rmdir -- "$dir" 2>/dev/null || true
      log "no cgroup limits: cgroup v2 does not let this script enable memory, pids and cpu below ${own:-/}; memory and CPU of the build are unbounded"
    fi
    return 0
  fi
  while IFS=: read -r _ controllers own; do
    dir=
    case ",$controllers," in
      *,memory,*) dir=/sys/fs/cgroup/memory ;;
      *,pids,*) dir=/sys/fs/cgroup/pids ;;
      *,cpu,*) dir=/sys/fs/cgroup/$controllers ;;
    esac
    [[ -n $dir && -f $dir/cgroup.procs ]] || continue
    dir=$dir${own%/}/$name
    { [[ -d $dir ]] || mkdir -- "$dir"; } 2>/dev/null || continue
    case ",$controllers," in
      *,memory,*) printf '%s\n' "$sandbox_memory" >"$dir/memory.limit_in_bytes" ;;
      *,pids,*) printf '%s\n' "$sandbox_tasks" >"$dir/pids.max" ;;
      *,cpu,*) printf '100000\n' >"$dir/cpu.cfs_period_us" && printf '%s\n' "$quota" >"$dir/cpu.cfs_quota_us" ;;
    esac 2>/dev/null && sandbox_cgroups+=("$dir")
  done </proc/self/cgroup
  ((${#sandbox_cgroups[@]})) || log "no cgroup limits: no memory, pids or cpu cgroup could be made; memory and CPU of the build are unbounded"
}

# Fill sandbox_cmd: what runs `env -i <build environment> <command>` as the build user in the
# sandbox for the step <name> in <folder>. <online> 1: the step gets the proxy socket's relay (npm
# ci, the build), 0: no way out at all (the export, the package probe).
sandbox_prefix() {
  local dir=$1 name=$2 online=$3 property
  local -a relay=()
  if ((online)) && [[ -n ${sandbox_proxy_socket:-} ]]; then
    relay=("$sandbox_node" /run/build-proxy-relay.mjs "$SANDBOX_PROXY_PORT" /run/build-proxy.sock --)
  fi
  case $sandbox_kind in
    none)
      sandbox_cmd=()
      [[ -z $sandbox_user ]] || sandbox_cmd=(setpriv "--reuid=$sandbox_user" "--regid=$sandbox_group" --init-groups --no-new-privs --)
      ;;
    bwrap)
      sandbox_cmd=(timeout --foreground -k 5 "$sandbox_timeout")
      [[ -z $sandbox_netns ]] || sandbox_cmd+=(nsenter "--net=$sandbox_netns" --)
      sandbox_cmd+=("${sandbox_drop[@]}" "${sandbox_bwrap[@]}" --chdir "$dir" -- "${relay[@]}")
      ;;
    systemd)
      sandbox_unit="deploy-build-$sandbox_service-${sandbox_release_dir##*/}-$name"
      sandbox_cmd=(systemd-run --quiet --wait --pipe --collect --service-type=exec
        "--unit=$sandbox_unit" "--working-directory=$dir"
        -p "User=$sandbox_user" -p "Group=$sandbox_group")
      for property in "${sandbox_properties[@]}"; do sandbox_cmd+=(-p "$property"); done
      # The build's files must stay readable by the site's group once sealed (sealing removes write
      # access only), so the build keeps the usual umask instead of the sites' 0077.
      sandbox_cmd+=(-p UMask=0022 -p "TemporaryFileSystem=/dev/shm:mode=1777")
      # Nothing of the platform or another target in view: the deploy root and the platform's
      # checkout become empty, the webhook's configuration and state do not exist; the build's own
      # folders are bound back.
      [[ ${sandbox_deploy_dir%/*} == '' ]] || sandbox_cmd+=(-p "TemporaryFileSystem=${sandbox_deploy_dir%/*}:ro")
      sandbox_cmd+=(-p "TemporaryFileSystem=$sandbox_platform:ro" -p "InaccessiblePaths=-/etc/webhook-server -/var/lib/webhook-server")
      sandbox_cmd+=(-p "BindPaths=$sandbox_release_dir $sandbox_deploy_dir/cache${sandbox_npm_cache:+ $sandbox_npm_cache}" -p "BindReadOnlyPaths=$sandbox_content")
      if [[ -n $sandbox_allowed ]]; then
        sandbox_cmd+=(-p IPAddressDeny=any -p "IPAddressAllow=$sandbox_allowed")
      else
        sandbox_cmd+=(-p PrivateNetwork=yes -p IPAddressDeny=any -p IPAddressAllow=localhost)
      fi
      [[ -z ${sandbox_proxy_socket:-} ]] || sandbox_cmd+=(-p "BindPaths=$sandbox_proxy_socket:/run/build-proxy.sock" -p "BindReadOnlyPaths=$sandbox_relay:/run/build-proxy-relay.mjs")
      sandbox_cmd+=(-p "MemoryMax=$sandbox_memory" -p "TasksMax=$sandbox_tasks" -p "CPUQuota=$sandbox_cpu"
        -p "LimitFSIZE=$sandbox_fsize" -p "LimitNPROC=$sandbox_tasks" -p "RuntimeMaxSec=$sandbox_timeout" -- "${relay[@]}")
      ;;
  esac
}

# In the subshell that becomes the step (before exec), as root: the rlimits every process of the
# step inherits and the cgroups. RLIMIT_NPROC counts every process of the build user, so it bounds
# the step only when the build user is a target's own (isolation); RLIMIT_FSIZE also bounds what a
# step writes into its build log.
sandbox_enter() {
  [[ $sandbox_kind == bwrap ]] || return 0
  local dir
  ulimit -f $((sandbox_fsize / 1024))
  [[ -z $sandbox_user ]] || ulimit -u "$sandbox_tasks"
  for dir in "${sandbox_cgroups[@]}"; do
    printf '%s\n' "$BASHPID" >"$dir/cgroup.procs" || return 1
  done
}

# The disk a build holds: its release and its target's cache/ (HOME and the npm cache), in bytes
# allocated, counted by du as the build user (du follows no link and crosses no mount point; as that
# user it reads nothing the build could not read itself).
sandbox_disk_used() {
  local -a as_user=()
  [[ -z $sandbox_user ]] || as_user=(setpriv "--reuid=$sandbox_user" "--regid=$sandbox_group" --init-groups --no-new-privs --)
  "${as_user[@]}" du -scx --block-size=1 -- "$sandbox_release_dir" "$sandbox_deploy_dir/cache" 2>/dev/null | sed -n 's/^\([0-9]*\)[[:space:]]*total$/\1/p'
}

# While the step <pid> runs: past DEPLOY_BUILD_DISK_MAX, mark <flag> and kill the step (bwrap: its
# timeout(1), whose death takes bwrap and the whole pid namespace with it, --die-with-parent;
# systemd: every process of its unit). Run in the background by the deploy script.
#   sandbox_watch_disk <pid> <flag>
sandbox_watch_disk() {
  local pid=$1 flag=$2 used
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    used=$(sandbox_disk_used) || continue
    if [[ -z $used ]] || ((used <= sandbox_disk)); then continue; fi
    printf '%s\n' "$used" >"$flag"
    case $sandbox_kind in
      systemd) systemctl kill --signal=SIGKILL -- "$sandbox_unit.service" 2>/dev/null || true ;;
      *) kill -KILL "$pid" 2>/dev/null || true ;;
    esac
    return 0
  done
}

# Once the deploy ends: nothing a step left stays in the build's cgroups (the sandbox's namespace
# ended it already; this is for a step killed half-way). The cgroups themselves stay for the
# target's next deploy (making one costs the kernel a few milliseconds), with the limits written
# again by each deploy.
sandbox_cleanup() {
  local dir pid
  for dir in "${sandbox_cgroups[@]}"; do
    [[ -f $dir/cgroup.procs ]] || continue
    while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$dir/cgroup.procs"
  done
}
