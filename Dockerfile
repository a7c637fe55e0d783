# Toolport: multi-stage build on Node 24 LTS (Debian bookworm slim).
# Build:  docker build -t toolport .
# Run:    docker run -p 8080:8080 --read-only --tmpfs /tmp \
#           -v $PWD/deploy/compose/toolport.yaml:/etc/toolport/toolport.yaml:ro toolport
# The root filesystem can be read-only: the service writes only to the
# workspace volume and /tmp (a tmpfs). The config must say
# `workspaces: { root: /var/lib/toolport/workspaces }` (the default root is
# under /tmp, lost with it) and, as the image listens on 0.0.0.0, give
# tokens (`auth.tokens`); deploy/compose/toolport.yaml does both.
# docs/DEPLOY.md has the details.

# Stage 1: `npm run build` with the dev dependencies: tsc checks the types,
# rolldown bundles the service into dist/bundle (scripts/rolldown.config.ts),
# and a first start writes V8's compile cache beside it.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/rolldown.config.ts scripts/write-compile-cache.ts ./scripts/
COPY src ./src
RUN npm run build
# Node keeps a compile cache per uid: it is written again as the runtime user,
# with the runtime's node and flags and at the runtime's paths (/app), then made
# read-only for everyone (the service only reads it; see docs/PERFORMANCE.md).
RUN rm -rf dist/bundle/compile-cache && chown 10001:10001 dist/bundle
USER 10001:10001
RUN node scripts/write-compile-cache.ts
USER root
RUN chown -R root:root dist/bundle && chmod -R a+rX,a-w dist/bundle/compile-cache

# Stage 2: the production dependencies only.
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts && npm cache clean --force

# Stage 3: the runtime image.
FROM node:24-bookworm-slim
# tini is PID 1 and reaps the zombies of the processes tools spawn; bubblewrap
# is the sandbox; util-linux gives prlimit for per-process resource limits.
RUN apt-get update \
  && apt-get install -y --no-install-recommends tini bubblewrap util-linux ca-certificates \
  && rm -rf /var/lib/apt/lists/* \
  && useradd --system --uid 10001 --user-group --home-dir /var/lib/toolport --create-home toolport \
  && mkdir -p /var/lib/toolport/workspaces /etc/toolport \
  && chown -R toolport:toolport /var/lib/toolport
WORKDIR /app
# The production node_modules: the bundle leaves out the packages that read files beside their own code (pino-pretty, the Swagger UI's static files).
COPY --from=deps /app/node_modules ./node_modules
# With its compile cache (dist/bundle/compile-cache), owned by root and read-only.
COPY --from=build /app/dist/bundle ./dist/bundle
COPY package.json ./
# HOME is /tmp: the root filesystem is read-only in the compose file and the Deployment, and a stdio MCP
# server that npx installs writes its cache under HOME (the only variables the MCP SDK passes it are HOME,
# PATH, USER, LOGNAME, SHELL and TERM).
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    HOME=/tmp
USER 10001:10001
VOLUME ["/var/lib/toolport/workspaces"]
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--"]
# A young generation of at most 8 MiB: see docs/PERFORMANCE.md (every process a tool starts copies the page tables of the service).
CMD ["node", "--max-semi-space-size=8", "dist/bundle/server.js", "--config", "/etc/toolport/toolport.yaml"]
