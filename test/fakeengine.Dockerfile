# The fake vLLM/SGLang engine image used by make e2e on kind: each model pod runs
# `fake-engine --serve-pod --port=8000 --base-model=<model>`.
FROM golang:1.26 AS builder
ENV GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local
WORKDIR /src
COPY test/go.mod test/go.sum test/
RUN cd test && go mod download
COPY test/ test/
RUN cd test && go build -trimpath -ldflags "-s -w" -o /out/fake-engine ./fakeengine/cmd/fake-engine

FROM gcr.io/distroless/static:nonroot
COPY --from=builder /out/fake-engine /fake-engine
USER 65532:65532
ENTRYPOINT ["/fake-engine"]
