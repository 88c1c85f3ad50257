# syntax=docker/dockerfile:1
# A static kargo-latch on a distroless, non-root base. Build it where a
# container engine runs: docker build -t kargo-latch:dev --build-arg VERSION=v0.1.0 .
FROM golang:1.26 AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/kargo-latch ./cmd/kargo-latch

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kargo-latch /kargo-latch
USER 65532:65532
ENTRYPOINT ["/kargo-latch"]
