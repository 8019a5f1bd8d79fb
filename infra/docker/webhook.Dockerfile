# syntax=docker/dockerfile:1
# The deployment webhook server (services/webhook) and, with another command, the branch-sites
# supervisor (infra/sites). Build from the repository root:
#   docker build -f infra/docker/webhook.Dockerfile -t geodata/webhook:0.1.0 .
# Same layout as api.Dockerfile (compiled JavaScript).
#
# The deploy script (scripts/deploy-branch.sh) clones, builds and health-checks sites, hence git,
# curl and ssh. Restarts go through /usr/local/bin/sites-restart (the control socket), never Docker.

ARG NODE_IMAGE=node:20.20.2-bookworm-slim

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts

FROM deps AS build
COPY infra/docker/build.ts ./infra/docker/build.ts
COPY services/shared ./services/shared
COPY services/webhook ./services/webhook
# The deploy script and the release helpers it sources.
COPY scripts/deploy-branch.sh ./scripts/deploy-branch.sh
COPY scripts/host/lib ./scripts/host/lib
COPY config ./config
COPY infra/sites ./infra/sites
RUN node --import tsx infra/docker/build.ts --out dist services/shared services/webhook scripts/deploy-branch.sh scripts/host/lib config infra/sites

FROM deps AS runtime-deps
RUN npm prune --omit=dev --no-audit --no-fund

FROM ${NODE_IMAGE} AS runtime
# Debian's current bookworm packages (security updates included) rather than pinned versions.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends git curl ca-certificates openssh-client procps \
 && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production WEBHOOK_PORT=9321
WORKDIR /app
COPY --from=runtime-deps /app/node_modules ./node_modules
COPY package.json ./
COPY --from=build /app/dist ./
# The restart command of the deploy script (a request on the sites control socket).
COPY --chmod=755 infra/docker/sites-restart.sh /usr/local/bin/sites-restart
# The mount points (a new named volume copies their ownership, so the service user can write the
# deploy root, the control socket and its state).
RUN mkdir -p /srv/sites /run/sites /var/lib/webhook \
 && chown node:node /srv/sites /run/sites /var/lib/webhook
# Privilege separation: one build and one site user per target
# (services/webhook/src/host/users.ts); the same image runs the sites container, so both agree on
# the uids. The stack starts both containers as root (user "0") with WEBHOOK_USER=node: the deploy
# launcher stays root (it runs each build as its target's build user; procps' pkill ends
# leftovers), the server gives up root for node before it reads a secret, and the sites
# supervisor starts each site as its site user. Run as node (this default), production refuses
# to start unless DEPLOY_ISOLATION=none is set explicitly.
RUN node services/webhook/src/host/cli.js users --apply
USER node
EXPOSE 9321
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.WEBHOOK_PORT||9321)+'/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
CMD ["node", "services/webhook/src/server.js"]
