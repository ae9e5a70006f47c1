# Images of the exporter and the reclaimer:
#   docker build --target exporter  -t gpureclaim-exporter .
#   docker build --target reclaimer -t gpureclaim-reclaimer .
#   docker build --target backtest  -t gpureclaim-backtest .
# (make images). Not built in this repository's CI, which has no container engine.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
ENV LDFLAGS="-X github.com/prometheus/common/version.Version=${VERSION} -X github.com/prometheus/common/version.Revision=${REVISION} -X github.com/prometheus/common/version.Branch=main"
# The exporter calls NVML through cgo and loads libnvidia-ml.so.1, which the
# NVIDIA container runtime mounts, at run time; lazy binding lets it start
# on drivers that lack the newest symbols.
RUN CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
    go build -trimpath -ldflags "${LDFLAGS} -extldflags=-Wl,-z,lazy" -o /out/gpureclaim-exporter ./exporter
# Time zone data inside: policy windows name time zones.
RUN CGO_ENABLED=0 go build -trimpath -tags timetzdata -ldflags "${LDFLAGS}" -o /out/gpureclaim-reclaimer ./reclaimer
RUN CGO_ENABLED=0 go build -trimpath -tags timetzdata -ldflags "${LDFLAGS}" -o /out/gpureclaim-backtest ./backtest

# glibc, for libnvidia-ml.so.1; root by default, as the exporter needs for
# the kubelet's socket and GPM (the chart drops every other privilege).
FROM gcr.io/distroless/base-debian12 AS exporter
COPY --from=build /out/gpureclaim-exporter /usr/local/bin/gpureclaim-exporter
EXPOSE 9847
ENTRYPOINT ["/usr/local/bin/gpureclaim-exporter"]

FROM gcr.io/distroless/static-debian12:nonroot AS reclaimer
COPY --from=build /out/gpureclaim-reclaimer /usr/local/bin/gpureclaim-reclaimer
EXPOSE 9849
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpureclaim-reclaimer"]

FROM gcr.io/distroless/static-debian12:nonroot AS backtest
COPY --from=build /out/gpureclaim-backtest /usr/local/bin/gpureclaim-backtest
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpureclaim-backtest"]
