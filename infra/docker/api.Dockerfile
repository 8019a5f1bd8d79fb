# syntax=docker/dockerfile:1
# The feature API (services/api) and its migration job. Build from the repository root:
#   docker build -f infra/docker/api.Dockerfile -t geodata/api:0.1.0 .
#
# The image runs compiled JavaScript: the build stage strips the types file by file (infra/docker/
# build.ts), keeping the source layout, so the SQL migrations and swagger-ui-dist are found where the
# code looks for them. Only production dependencies ship; no TypeScript runner.
# infra/docker/image.ts reads this file to assemble the same file set without Docker (the tests and
# the stack rehearsal): keep to FROM, WORKDIR, COPY, ENV, RUN of the forms it knows.

ARG NODE_IMAGE=node:20.20.2-bookworm-slim

# ---- all dependencies, exactly as locked; no install scripts run
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts

# ---- TypeScript → JavaScript, same layout under dist/
FROM deps AS build
COPY infra/docker/build.ts ./infra/docker/build.ts
COPY services/shared ./services/shared
COPY services/api ./services/api
COPY config ./config
RUN node --import tsx infra/docker/build.ts --out dist services/shared services/api config

# ---- production dependencies only
FROM deps AS runtime-deps
RUN npm prune --omit=dev --no-audit --no-fund

# ---- runtime: code owned by root and read-only for the service user
FROM ${NODE_IMAGE} AS runtime
# GDAL's ogr2ogr reads the imports (GeoJSON, GeoPackage, CSV, zipped Shapefile; services/api/src/imports).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gdal-bin \
 && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production PORT=8080 DATA_DIR=/var/lib/api
WORKDIR /app
COPY --from=runtime-deps /app/node_modules ./node_modules
COPY package.json ./
COPY --from=build /app/dist ./
# State kept between restarts (a named volume copies this directory's ownership on first use).
RUN mkdir -p /var/lib/api && chown node:node /var/lib/api
USER node
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# The V8 flags: services/shared/node-flags.ts says why (npm start and the benchmarks pass them too).
CMD ["node", "--no-allocation-site-pretenuring", "--max-semi-space-size=16", "services/api/src/server.js"]
