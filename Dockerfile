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
    && mkdir -p /rootfs/tmp /rootfs/var/lib/tagpilot /rootfs/var/cache/tagpilot \
        /rootfs/usr/share/man/man1 \
    # The man page, generated from the flags (`tagpilot man`), for `man -l` from the image.
    && target/release/tagpilot man > /rootfs/usr/share/man/man1/tagpilot.1

# helm and kustomize for the rendered diff of pull requests (`write.renderedDiff`, `plan --diff
# --rendered`), pinned to the versions Argo CD ships (argoproj/argo-cd hack/tool-versions.sh:
# HELM_VERSION, KUSTOMIZE_VERSION), so tagpilot renders as the repo server does. Both are static
# Go binaries and run on scratch. Each download is checked against the checksum its release
# publishes.
FROM alpine:3 AS tools
ARG TARGETARCH=amd64
ARG HELM_VERSION=4.2.1
ARG KUSTOMIZE_VERSION=5.8.1
RUN apk add --no-cache curl \
    && cd /tmp \
    && helm="helm-v${HELM_VERSION}-linux-${TARGETARCH}.tar.gz" \
    && curl -fsSLO "https://get.helm.sh/${helm}" \
    && curl -fsSL "https://get.helm.sh/${helm}.sha256sum" | sha256sum -c - \
    && tar -xzf "${helm}" "linux-${TARGETARCH}/helm" \
    && install -m 0755 "linux-${TARGETARCH}/helm" /usr/local/bin/helm \
    && kustomize="kustomize_v${KUSTOMIZE_VERSION}_linux_${TARGETARCH}.tar.gz" \
    && base="https://github.com/kubernetes-sigs/kustomize/releases/download/kustomize%2Fv${KUSTOMIZE_VERSION}" \
    && curl -fsSLO "${base}/${kustomize}" \
    && curl -fsSL "${base}/checksums.txt" | grep " ${kustomize}\$" | sha256sum -c - \
    && tar -xzf "${kustomize}" kustomize \
    && install -m 0755 kustomize /usr/local/bin/kustomize

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=tools /usr/local/bin/helm /usr/local/bin/kustomize /usr/local/bin/
# Writable places for a plain `docker run`; in Kubernetes they are emptyDir volumes.
COPY --from=build --chown=65532:65532 /rootfs/ /
COPY --from=build /src/target/release/tagpilot /usr/local/bin/tagpilot
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    HOME=/tmp \
    PATH=/usr/local/bin
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/tagpilot"]
CMD ["run", "--config", "/etc/tagpilot/config/tagpilot.yaml", "--state-dir", "/var/lib/tagpilot", "--cache-dir", "/var/cache/tagpilot"]
