# hunt-runner container image: one static binary (CGO_ENABLED=0) on an empty base.
#
#   make image                      # docker build (or buildah bud) -t hunt-runner:dev .
#   docker run --rm hunt-runner:dev --help
#
# The image holds no shell, no package manager and no chDB: the embedded engine is for tests and
# `hunt-runner dev` on a workstation only. -tags nochdb leaves it out of the binary, which keeps
# the binary fully static (the engine's loader, purego, would make it need ld-linux, which a
# scratch image does not have). It runs as 65532:65532 and
# needs nothing writable except /tmp (an emptyDir in the Helm chart, a tmpfs in deploy/compose).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first, so that a source change does not download modules again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# What `hunt-runner --version` prints (make image passes git describe). .git is not in the build
# context, so without it the binary can only say "devel".
ARG VERSION=
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -tags nochdb -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/hunt-runner ./cmd/hunt-runner
# The runtime's file system: CA certificates for TLS to ClickHouse and git, a nonroot user, an
# empty sticky /tmp.
RUN mkdir -p /rootfs/etc/ssl/certs /rootfs/tmp && chmod 1777 /rootfs/tmp && \
    cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ && \
    echo 'nonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin' > /rootfs/etc/passwd && \
    echo 'nonroot:x:65532:' > /rootfs/etc/group

FROM scratch
COPY --from=build /rootfs/ /
COPY --from=build /out/hunt-runner /usr/local/bin/hunt-runner
ENV HOME=/tmp
USER 65532:65532
# run: /metrics /healthz /readyz; shim: /keda/hunt-backlog.
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/hunt-runner"]
CMD ["run"]
