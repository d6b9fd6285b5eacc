# syntax=docker/dockerfile:1
# tagpilot as a small static image: built against musl on Alpine (OpenSSL, libgit2 and libssh2
# linked statically), shipped on `scratch` with only the binary and the CA certificates, run
# as a non-root user. Build from the repository root:
#   docker build -f Dockerfile -t tagpilot .

FROM rust:1-alpine AS build
RUN apk add --no-cache musl-dev openssl-dev openssl-libs-static pkgconf perl make cmake \
        linux-headers ca-certificates
WORKDIR /src
COPY . .
# Static OpenSSL for git2's HTTPS and SSH transports; everything else is rustls.
ENV OPENSSL_STATIC=1
RUN cargo build --release --locked --bin tagpilot \
    && strip target/release/tagpilot \
    # A dynamic binary would not run on scratch: fail the build instead.
    && if ldd target/release/tagpilot 2>&1 | grep -q '=>'; then \
           echo "tagpilot is dynamically linked" >&2; exit 1; \
       fi \
    && mkdir -p /rootfs/tmp /rootfs/var/lib/tagpilot /rootfs/var/cache/tagpilot

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# Writable places for a plain `docker run`; in Kubernetes they are emptyDir volumes.
COPY --from=build --chown=65532:65532 /rootfs/ /
COPY --from=build /src/target/release/tagpilot /usr/local/bin/tagpilot
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    HOME=/tmp
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/tagpilot"]
CMD ["run", "--config", "/etc/tagpilot/config/tagpilot.yaml", "--state-dir", "/var/lib/tagpilot", "--cache-dir", "/var/cache/tagpilot"]
