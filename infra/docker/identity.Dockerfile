# syntax=docker/dockerfile:1
# The login, consent and logout app (identity/). Build from the repository root:
#   docker build -f infra/docker/identity.Dockerfile -t geodata/login:0.1.0 .
# Same layout as api.Dockerfile (compiled JavaScript; identity/config travels with the code).

ARG NODE_IMAGE=node:20.20.2-bookworm-slim

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts

FROM deps AS build
COPY infra/docker/build.ts ./infra/docker/build.ts
COPY services/shared ./services/shared
COPY identity ./identity
RUN node --import tsx infra/docker/build.ts --out dist services/shared identity

FROM deps AS runtime-deps
RUN npm prune --omit=dev --no-audit --no-fund

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production IDENTITY_PORT=4455
WORKDIR /app
COPY --from=runtime-deps /app/node_modules ./node_modules
COPY package.json ./
COPY --from=build /app/dist ./
USER node
EXPOSE 4455
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.IDENTITY_PORT||4455)+'/health/alive').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
CMD ["node", "identity/src/app/server.js"]
