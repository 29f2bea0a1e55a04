# runnel image: runnel-dispatcher, runnel-worker, runnel (CLI) and
# runnel-mock-agent on Debian 12, running as uid 10001.
#
#   docker build -t REGISTRY/runnel:0.1.0 .
#   docker run --rm REGISTRY/runnel:0.1.0 runnel-worker --help
#
# The chart (charts/runnel) runs it with command runnel-dispatcher or
# runnel-worker. The worker's bubblewrap sandbox binds this image's /usr,
# /bin, /lib* and /etc read-only as the agent's root: an agent program
# ("agent": {"kind": "command"}) must exist in the image, so build agent
# images FROM this one.
#
# ACP agents ("agent": {"kind": "acp", "preset": "claude" | "codex"}): the
# pinned adapters of agents/package.json are installed by agents/install.sh
# into /opt/runnel/agents, and Debian's Node.js runs the Claude one; the
# worker binds both read-only into each sandbox (RUNNEL_ACP_PREFIX,
# RUNNEL_NODE). They add about 310 MB to the image.

ARG DEBIAN_IMAGE=debian:12-slim

# ---- build: Release build with the compiler the test suite uses ----------
FROM ${DEBIAN_IMAGE} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      clang-14 cmake make pkg-config libc6-dev \
      librdkafka-dev libhiredis-dev libcurl4-openssl-dev libarchive-dev \
      libsodium-dev libjansson-dev libevent-dev libseccomp-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-14 \
      -DRUNNEL_SANITIZE=OFF -DRUNNEL_FUZZ=OFF \
 && cmake --build /build -j"$(nproc)" \
      --target runnel-worker runnel-dispatcher runnel runnel-mock-agent runnel-agent runnel-egress-bridge runnel-warm-init runnel-unpack \
 && install -D -m 0755 -t /out/usr/local/bin \
      /build/worker/runnel-worker \
      /build/worker/runnel-mock-agent \
      /build/worker/runnel-agent \
      /build/worker/runnel-egress-bridge \
      /build/worker/runnel-warm-init \
      /build/worker/runnel-unpack \
      /build/dispatcher/runnel-dispatcher \
      /build/cli/runnel

# ---- agents: the ACP adapters, from the lock file -------------------------
FROM ${DEBIAN_IMAGE} AS agents
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY agents/ /src/agents/
COPY scripts/npm_prefix.sh /src/scripts/
RUN /src/agents/install.sh /opt/runnel/agents && rm -rf /root/.npm

# ---- runtime: the shared libraries, bubblewrap, CA certificates -----------
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      librdkafka1 libhiredis0.14 libcurl4 libarchive13 libsodium23 \
      libjansson4 libevent-2.1-7 libevent-pthreads-2.1-7 libseccomp2 \
      bubblewrap ca-certificates nodejs \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 runnel \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/runnel \
      --no-create-home --shell /usr/sbin/nologin runnel \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/runnel

# runnel-worker finds runnel-mock-agent, runnel-agent, runnel-egress-bridge,
# runnel-warm-init and runnel-unpack next to itself (/proc/self/exe), so they
# all live in /usr/local/bin.
COPY --from=build /out/ /
COPY --from=agents /opt/runnel/agents /opt/runnel/agents

# Listen on all interfaces inside the container (the programs' own defaults
# are loopback); the work directory is writable by uid 10001. In a pod with
# a read-only root filesystem, mount an emptyDir there (the chart does).
ENV RUNNEL_WORK_DIR=/var/lib/runnel \
    RUNNEL_ACP_PREFIX=/opt/runnel/agents \
    RUNNEL_LISTEN=0.0.0.0:8080 \
    RUNNEL_METRICS_LISTEN=0.0.0.0:9464

LABEL org.opencontainers.image.title="runnel" \
      org.opencontainers.image.description="Queue-fed sandbox runner: dispatcher, worker, CLI" \
      org.opencontainers.image.version="0.1.0"

USER 10001:10001
WORKDIR /var/lib/runnel
EXPOSE 8080 9464
CMD ["runnel", "--help"]
