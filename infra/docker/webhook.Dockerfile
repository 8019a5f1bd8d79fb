# syntax=docker/dockerfile:1
# The deployment path of the stack, one image with four commands (infra/images.ts ENTRY_POINTS):
# the webhook server (services/webhook, the CMD), a target's builder (infra/builder), a target's site
# supervisor (infra/sites) and the builds' egress proxy (infra/egress). Build from the repository root:
#   docker build -f infra/docker/webhook.Dockerfile -t geodata/webhook:0.1.0 .
# Same layout as api.Dockerfile (compiled JavaScript).
#
# The builder runs the deploy script (scripts/deploy-branch.sh), which clones and builds sites as the
# target's build user (setpriv, util-linux) and ends its leftovers (pkill, procps), hence git, curl and
# ssh. The webhook hands deploys to the builders through /usr/local/bin/build-submit (a request in the
# target's spool); the builders restart sites through /usr/local/bin/sites-restart (the site's control
# socket). Nothing in this image talks to Docker. On the Kubernetes target the webhook's deploy script is
# /usr/local/bin/k8s-deploy (infra/k8s-deploy: the Kubernetes API, no kubectl), and a build Job's fetch
# step runs git from this image.

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
COPY infra/builder ./infra/builder
COPY infra/egress ./infra/egress
# The Kubernetes target's deploy driver and the target names it shares with the Pulumi program.
COPY infra/k8s-deploy ./infra/k8s-deploy
COPY infra/stack/targets.ts ./infra/stack/targets.ts
RUN node --import tsx infra/docker/build.ts --out dist services/shared services/webhook scripts/deploy-branch.sh scripts/host/lib config infra/sites infra/builder infra/egress infra/k8s-deploy infra/stack/targets.ts

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
# The builders' restart command (a request on a site's control socket) and the webhook's deploy
# script (a request in a target's build spool).
COPY --chmod=755 infra/docker/sites-restart.sh /usr/local/bin/sites-restart
COPY --chmod=755 infra/docker/build-submit.sh /usr/local/bin/build-submit
# On the Kubernetes target the webhook's deploy script is the driver (a Job per deploy, then the site's image).
COPY --chmod=755 infra/docker/k8s-deploy.sh /usr/local/bin/k8s-deploy
# Mount points: the webhook's state (a new named volume copies this ownership) and its spool root; a
# builder's or a site's target directory and control directory (the builder sets their owners).
RUN mkdir -p /var/lib/webhook /srv/spool /srv/site /run/site \
 && chown node:node /var/lib/webhook /srv/spool
# The webhook server and the egress proxy run as node (this default); a site runs as its target's
# uid and a builder starts as root and creates its target's users itself (infra/builder/main.ts).
USER node
EXPOSE 9321
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.WEBHOOK_PORT||9321)+'/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
CMD ["node", "services/webhook/src/server.js"]
