# syntax=docker/dockerfile:1
# Operations jobs of the stack: GeoServer provisioning (infra/geoserver). Build from the repository root:
#   docker build -f infra/docker/ops.Dockerfile -t geodata/ops:0.1.0 .
# Same layout as api.Dockerfile (compiled JavaScript).

ARG NODE_IMAGE=node:20.20.2-bookworm-slim

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts

FROM deps AS build
COPY infra/docker/build.ts ./infra/docker/build.ts
COPY services/shared ./services/shared
COPY infra/geoserver ./infra/geoserver
RUN node --import tsx infra/docker/build.ts --out dist services/shared infra/geoserver

FROM deps AS runtime-deps
RUN npm prune --omit=dev --no-audit --no-fund

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=runtime-deps /app/node_modules ./node_modules
COPY package.json ./
COPY --from=build /app/dist ./
USER node
# A one-shot job (it exits when provisioning is done): there is no long-running process to probe.
HEALTHCHECK NONE
CMD ["node", "infra/geoserver/cli.js"]
