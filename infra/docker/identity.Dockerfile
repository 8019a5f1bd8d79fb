# syntax=docker/dockerfile:1
# The login, consent and logout app (identity/). Build from the repository root:
#   docker build -f infra/docker/identity.Dockerfile -t geodata/login:0.1.0 .
# Same layout as api.Dockerfile (see there why tsx runs the TypeScript sources).

ARG NODE_IMAGE=node:20.20.2-bookworm-slim

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts

FROM deps AS runtime-deps
RUN mkdir /keep \
 && cp -a node_modules/tsx node_modules/esbuild node_modules/@esbuild /keep/ \
 && npm prune --omit=dev --no-audit --no-fund \
 && cp -a /keep/. node_modules/

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production IDENTITY_PORT=4455
WORKDIR /app
COPY --from=runtime-deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY services/shared ./services/shared
COPY identity ./identity
USER node
EXPOSE 4455
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.IDENTITY_PORT||4455)+'/health/alive').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
CMD ["node", "--import", "tsx", "identity/src/app/server.ts"]
