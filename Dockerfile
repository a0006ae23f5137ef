# The label service's image: the four binaries (api, worker, reconcile,
# carrier) in /usr/local/bin of a distroless static base, run as its nonroot
# user (65532). No shell and no package manager: the manifests in deploy/
# name each command, and deploy/image_test.go checks them against this file.
#
# Build it with `go tool task image` (docker buildx; an OCI archive, nothing
# pushed). Reproducible: static, trimmed binaries without build ids or VCS
# stamps, file times set to SOURCE_DATE_EPOCH (the last commit's time) by the
# task. Pin BASE_IMAGE and GO_IMAGE by digest (name@sha256:…) for byte-equal
# rebuilds across time.

ARG GO_IMAGE=golang:1.26.8
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG SOURCE_DATE_EPOCH
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -buildid=" \
      -o /out/ ./cmd/api ./cmd/worker ./cmd/reconcile ./cmd/carrier

FROM ${BASE_IMAGE}
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
