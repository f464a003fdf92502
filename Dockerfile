# The service's container image: `npm run build` in a build stage, then a production install
# (`npm ci --omit=dev`) and dist/ alone in the final stage, run as a non-root user under tini.
#
#   docker build -t payment-routing-service .               (or: podman build ...)
#   docker run --env-file service.env -p 3000:3000 payment-routing-service              API
#   docker run --env-file service.env payment-routing-service dist/main.js --worker-only worker
#   docker run --env-file service.env payment-routing-service dist/admin.js balances    operator commands
#
# BASE is any image with Node 22 and npm in its PATH on Debian (apt-get, useradd): the official
# node:22-bookworm-slim by default; the image's test builds on one made from Debian's packages
# (test/image/make-base-image.sh), since no registry is reachable there.
ARG BASE=node:22-bookworm-slim

FROM ${BASE} AS build
# Behind a TLS-intercepting proxy, npm needs the proxy's CA: pass a path to it that the build can
# read (podman build -v ca.crt:/run/ca.crt:ro --build-arg NODE_EXTRA_CA_CERTS=/run/ca.crt).
# A build argument is seen by the RUN steps only, never kept in the image's environment.
ARG NODE_EXTRA_CA_CERTS
WORKDIR /app
COPY package.json package-lock.json ./
# The npm cache is a build cache mount: a rebuild after a source change downloads nothing.
RUN --mount=type=cache,target=/root/.npm npm ci --no-audit --no-fund
COPY . .
RUN npm run build

FROM ${BASE}
# tini as PID 1: it forwards SIGTERM and SIGINT to node and reaps orphans; node as PID 1 would
# get no default signal handling from the kernel and leave zombies unreaped.
RUN apt-get update \
  && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tini \
  && rm -rf /var/lib/apt/lists/* \
  && useradd --user-group --uid 10001 --home-dir /home/service --create-home --shell /usr/sbin/nologin service
ARG NODE_EXTRA_CA_CERTS
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --no-audit --no-fund
COPY --from=build /app/dist ./dist
COPY --from=build /app/openapi/dist/openapi.json ./openapi/dist/openapi.json
COPY --from=build /app/server/console ./server/console
# Listens on every interface of the container; migrations run at every start (safe from several
# processes at once: Kysely's and graphile-worker's migrations and the database functions each
# take an advisory lock or detect a concurrent run). DATA_DIR is unused with DATABASE_URL set.
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    DATA_DIR=/home/service/data
USER service
EXPOSE 3000
# /health/ready of the API (PORT), or of a worker that serves its probes (WORKER_PORT).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.WORKER_PORT || process.env.PORT || 3000) + '/health/ready').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# The node flags of `npm run serve` (package.json); the command picks the entry point.
ENTRYPOINT ["/usr/bin/tini", "--", "node", "--heap-growing-percent=75", "--max-semi-space-size=16", "--import=./dist/source-maps.js"]
CMD ["dist/main.js"]
