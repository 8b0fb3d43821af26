# One image per controller: docker build --build-arg BINARY=adapter-controller|router-controller .
# The controller module builds on its own (GOWORK=off) with `replace ../shared`. Its tests use
# the test tooling module (`replace ../test`), whose go.mod the module graph needs; no test
# package is compiled into the binary.
FROM golang:1.26 AS builder
ARG BINARY=adapter-controller
ARG VERSION=dev
ENV GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local
WORKDIR /src

# Dependencies first, so source changes reuse this layer.
COPY shared/go.mod shared/go.sum shared/
COPY test/go.mod test/go.sum test/
COPY ${BINARY}/go.mod ${BINARY}/go.sum ${BINARY}/
RUN cd ${BINARY} && go mod download

COPY shared/ shared/
COPY ${BINARY}/ ${BINARY}/
RUN cd ${BINARY} && go build -trimpath \
      -ldflags "-s -w -X github.com/modelplane/modelplane/shared/version.Version=${VERSION}" \
      -o /out/manager .

FROM gcr.io/distroless/static:nonroot
ARG BINARY=adapter-controller
LABEL org.opencontainers.image.title="modelplane ${BINARY}" \
      org.opencontainers.image.source="https://github.com/modelplane/modelplane"
COPY --from=builder /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
