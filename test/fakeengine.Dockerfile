# The fake vLLM/SGLang engine image used by make e2e on kind: each model pod runs
# `fake-engine --serve-pod --port=8000 --base-model=<model>`.
# Base images as in the Dockerfile: build arguments, upstream by default.
ARG BUILDER_IMAGE=golang:1.26
ARG BASE_IMAGE=gcr.io/distroless/static:nonroot

FROM ${BUILDER_IMAGE} AS builder
ENV GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local
WORKDIR /src
COPY test/go.mod test/go.sum test/
RUN cd test && go mod download
COPY test/ test/
RUN cd test && go build -trimpath -ldflags "-s -w" -o /out/fake-engine ./fakeengine/cmd/fake-engine

FROM ${BASE_IMAGE}
COPY --from=builder /out/fake-engine /fake-engine
USER 65532:65532
ENTRYPOINT ["/fake-engine"]
