# Tether container image: `docker build -t tether .` (or `docker compose up`).
# Configuration is the environment, as for the binary (see the README);
# DATABASE_URL is required.

# --- build -------------------------------------------------------------------
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that code changes do not re-download them.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# A static binary: Tether needs no cgo (pgx is pure Go). The build tag
# kubernetes builds in the kubernetes provider: the image has every
# provider; nomsgpack leaves out gin's MessagePack codec, unused.
RUN CGO_ENABLED=0 go build -tags kubernetes,nomsgpack -trimpath -ldflags="-s -w" -o /tether ./cmd/api
# The ops commands (`tether sandboxes ls`, …), which tether runs from
# beside itself: a binary of their own, so that the server does not link
# the generated Go client.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /tetherctl ./cmd/tetherctl

# --- run ---------------------------------------------------------------------
FROM debian:bookworm-slim
# ca-certificates for TLS to Postgres and provider APIs; bubblewrap for the
# `local` provider, which runs each sandbox in a bubblewrap jail.
RUN apt-get update \
	&& apt-get install -y --no-install-recommends ca-certificates bubblewrap \
	&& rm -rf /var/lib/apt/lists/*
COPY --from=build /tether /tetherctl /

# The process runs as root on purpose: the `local` provider creates its
# sandboxes with bubblewrap, which needs namespace privileges that a
# non-root user in a container usually lacks. The container itself is the
# boundary; run it without extra capabilities unless the local provider is
# enabled.
WORKDIR /var/lib/tether
ENV LISTEN_ADDR=0.0.0.0:8080 \
	SIM_STATE_DIR=/var/lib/tether/sim \
	LOCAL_STATE_DIR=/var/lib/tether/local
EXPOSE 8080
ENTRYPOINT ["/tether"]
CMD ["serve"]
