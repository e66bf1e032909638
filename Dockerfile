# syntax=docker/dockerfile:1
# Gatehouse container image: `docker build -t gatehouse .`
# Stage 1 compiles the release binary; stage 2 is a slim Debian with that one
# file, run as an unprivileged user. See docs/deployment.md.

ARG RUST_VERSION=1
FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY . .
# Stripped and without debug info: the image carries no symbols it never uses.
ENV CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols
# Cache mounts keep the registry and compiled dependencies between builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p gatehouse --bin gatehouse \
    && install -D -m 0755 target/release/gatehouse /out/gatehouse

FROM debian:bookworm-slim
# Upstream TLS uses the certificates built into the binary (webpki roots), so
# the image needs no ca-certificates, no curl, no shell tools of ours.
RUN useradd --system --uid 10001 --user-group --home-dir /data --no-create-home gatehouse \
    && mkdir -p /data && chown gatehouse:gatehouse /data
COPY --from=build /out/gatehouse /usr/local/bin/gatehouse
# Owned before VOLUME is declared: a fresh named volume copies this ownership.
VOLUME /data
WORKDIR /data
ENV GATEHOUSE_LISTEN=0.0.0.0:8080 \
    GATEHOUSE_DATABASE_URL=sqlite:///data/gatehouse.db
USER 10001:10001
EXPOSE 8080
# `gatehouse healthcheck` GETs http://<GATEHOUSE_LISTEN>/healthz (0.0.0.0 means
# this container's loopback) and exits 0 on 200, else 1 within 5 seconds.
HEALTHCHECK --interval=10s --timeout=10s --start-period=30s --retries=3 \
    CMD ["gatehouse", "healthcheck"]
ENTRYPOINT ["gatehouse"]
CMD ["serve"]
