# Toolport: multi-stage build on Node 24 LTS (Debian slim).
# Build:  docker build -t toolport .
# Run:    docker run -p 8080:8080 -e HOST=0.0.0.0 -v $PWD/toolport.yaml:/etc/toolport/toolport.yaml:ro toolport

FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY scripts ./scripts
RUN npm run build && npm prune --omit=dev

FROM node:24-bookworm-slim
# tini reaps the zombies of the processes tools spawn; bubblewrap is the sandbox;
# util-linux gives prlimit for per-process resource limits.
RUN apt-get update \
  && apt-get install -y --no-install-recommends tini bubblewrap util-linux ca-certificates \
  && rm -rf /var/lib/apt/lists/* \
  && useradd --system --uid 10001 --home-dir /var/lib/toolport --create-home toolport \
  && mkdir -p /var/lib/toolport/workspaces /etc/toolport \
  && chown -R toolport:toolport /var/lib/toolport
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY examples ./examples
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080
USER toolport
VOLUME ["/var/lib/toolport/workspaces"]
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "dist/src/server.js", "--config", "/etc/toolport/toolport.yaml"]
