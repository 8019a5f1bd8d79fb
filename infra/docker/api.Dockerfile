# syntax=docker/dockerfile:1
# The feature API (services/api). Build from the repository root:
#   docker build -f infra/docker/api.Dockerfile -t geodata/api:0.1.0 .
#
# TypeScript runs through tsx at runtime instead of a compile step: the services read SQL migrations
# and YAML files relative to their sources, which a bundle would break, and tsx adds ~10 MB and a
# sub-second start. Only production dependencies plus tsx (and its esbuild) are in the image.

ARG NODE_IMAGE=node:20.20.2-bookworm-slim

# ---- all dependencies, exactly as locked; no install scripts run
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts

# ---- production dependencies plus the TypeScript runner
FROM deps AS runtime-deps
RUN mkdir /keep \
 && cp -a node_modules/tsx node_modules/esbuild node_modules/@esbuild /keep/ \
 && npm prune --omit=dev --no-audit --no-fund \
 && cp -a /keep/. node_modules/

# ---- runtime: code owned by root and read-only for the service user
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production PORT=8080 DATA_DIR=/var/lib/api
WORKDIR /app
COPY --from=runtime-deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY services/shared ./services/shared
COPY services/api ./services/api
COPY config ./config
# State kept between restarts (a named volume copies this directory's ownership on first use).
RUN mkdir -p /var/lib/api && chown node:node /var/lib/api
USER node
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
CMD ["node", "--import", "tsx", "services/api/src/server.ts"]
