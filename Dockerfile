# One image per controller: docker build --build-arg BINARY=adapter-controller|router-controller .
# Each controller module builds on its own (GOWORK=off) with `replace ../shared`. Its tests use
# the test tooling module (`replace ../test`), whose go.mod the module graph needs; no test
# package is compiled into a binary. The builder stage builds both binaries and does not
# depend on BINARY, so the second image of a pair reuses every builder layer of the first
# (and their common dependencies compile once).
#
# The base images are build arguments whose defaults are the upstream images; the Makefile
# passes its BUILDER_IMAGE and BASE_IMAGE (make docker-build says when one of them here is the
# offline image kit's stand-in, hack/images/kit.sh).
ARG BUILDER_IMAGE=golang:1.26
ARG BASE_IMAGE=gcr.io/distroless/static:nonroot

FROM ${BUILDER_IMAGE} AS builder
ARG VERSION=dev
ARG REVISION=unknown
ENV GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local
WORKDIR /src

# Dependencies first, so source changes reuse this layer.
COPY shared/go.mod shared/go.sum shared/
COPY test/go.mod test/go.sum test/
COPY adapter-controller/go.mod adapter-controller/go.sum adapter-controller/
COPY router-controller/go.mod router-controller/go.sum router-controller/
RUN for m in adapter-controller router-controller; do (cd $m && go mod download) || exit 1; done

COPY shared/ shared/
COPY adapter-controller/ adapter-controller/
COPY router-controller/ router-controller/
RUN for m in adapter-controller router-controller; do \
      (cd $m && go build -trimpath \
        -ldflags "-s -w -X github.com/loraplane/loraplane/shared/version.Version=${VERSION} -X github.com/loraplane/loraplane/shared/version.Revision=${REVISION}" \
        -o /out/$m .) || exit 1; \
    done

FROM ${BASE_IMAGE}
ARG BINARY=adapter-controller
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="loraplane ${BINARY}" \
      org.opencontainers.image.source="https://github.com/loraplane/loraplane" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/${BINARY} /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
