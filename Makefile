# Tether developer and CI tasks. `make` alone lists them.
#
# Postgres: `make run` and `make test` start a throwaway local cluster
# (scripts/postgres.sh: .data/dev on 127.0.0.1:55432, .data/test on
# 127.0.0.1:55433) unless DATABASE_URL is already set, in which case that
# database is used as is. `make pg-stop` stops both clusters.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-print-directory

# Use the Go toolchain that is installed; never download another.
export GOTOOLCHAIN := local

GO ?= go
BIN ?= bin/tether
# Settings for `make run`; override on the command line or in the environment,
# e.g. `make run LISTEN_ADDR=127.0.0.1:9090`.
BOOTSTRAP_API_KEY ?= dev-key-change-me
LISTEN_ADDR ?= 127.0.0.1:8080
# The enabled providers, the default first. Unset, `make run` chooses after
# installing what running needs (scripts/run.sh): local (real bubblewrap
# sandboxes) where it can run (bubblewrap, as root), else the simulated one.
PROVIDERS ?=
# The build tags of `make build`, `test`, `lint`, `bench` and `chaos`:
# kubernetes builds the kubernetes provider (client-go, most of a cold
# build); nomsgpack leaves out gin's MessagePack codec, which Tether does
# not use (a quarter of the rest). `make run` uses nomsgpack, and
# kubernetes only when PROVIDERS names it (scripts/run.sh).
TAGS ?= kubernetes,nomsgpack
# How long `make chaos` storms (the chaos test starts its own cluster, "chaos").
CHAOS_DURATION ?= 3m
# golangci-lint at a pinned version, built into bin/ by `make lint` when
# missing (a few minutes, once).
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/golangci-lint-$(GOLANGCI_LINT_VERSION)

.PHONY: help run test chaos bench docs lint openapi-lint console-vendor build pg-stop

help: ## Show this list of targets
	@echo "Tether: make TARGET"
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN { FS = ":.*## " } { printf "  %-9s %s\n", $$1, $$2 }'

# scripts/run.sh: deps, the providers (chosen after deps), Postgres, the
# build with its progress, then exec of the server (make's own child).
run: ## Run the API locally against the dev Postgres (starts it unless DATABASE_URL is set)
	@GO='$(GO)' BIN='$(BIN)' BOOTSTRAP_API_KEY='$(BOOTSTRAP_API_KEY)' LISTEN_ADDR='$(LISTEN_ADDR)' PROVIDERS='$(PROVIDERS)' \
		exec scripts/run.sh

test: ## Run all tests (with -race) against the test Postgres and Kubernetes control plane (started unless DATABASE_URL / KUBECONFIG are set)
	@scripts/deps.sh test
	@url=$$(scripts/postgres.sh start test | tail -n 1); \
	if [ -z "$${DATABASE_URL:-}" ]; then \
		export TETHER_TEST_ADMIN_URL=$$(scripts/postgres.sh admin-url test | tail -n 1); \
	fi; \
	echo "DATABASE_URL=$$url"; \
	export DATABASE_URL="$$url"; \
	if [ -z "$${KUBECONFIG:-}" ]; then \
		KUBECONFIG=$$(scripts/kube.sh start | tail -n 1) || exit 1; \
		export KUBECONFIG; \
	fi; \
	echo "KUBECONFIG=$$KUBECONFIG"; \
	$(GO) test -race -count=1 -timeout 30m -tags '$(TAGS)' ./...; \
	echo "a build without the kubernetes tag: its refusal of PROVIDERS=kubernetes"; \
	exec $(GO) test -race -count=1 -tags nomsgpack -run NotBuiltIn ./server ./internal/provider/kubernetes

bench: ## Benchmarks against pgbench on the same Postgres (own cluster "bench"), and bare client-go when KUBECONFIG is set; results and profiles in bench-results/ (BENCH_AB=REV: an A/B against that revision)
	$(GO) run -tags '$(TAGS)' ./cmd/bench -out bench-results $(BENCH_FLAGS)

chaos: ## The long chaos runs, each mode to its end: replicas killed at random, a Postgres restart, a replica partitioned, owners killed; invariants checked (CHAOS_DURATION=3m; logs in chaos-results/)
	CHAOS_DURATION=$(CHAOS_DURATION) TAGS='$(TAGS)' scripts/chaos.sh

# The API's contract, in order: swag makes the Swagger 2.0 document from the
# annotations in internal/http (fields without omitempty are required);
# internal/openapi adds the responses every operation of a group shares (its
# table, commons) to it and converts it to the OpenAPI 3.0 document; the Go
# client is generated from that. docs/docs_test.go and clients/go/tether check that
# all of them are current.
docs: ## Regenerate the API docs (Swagger 2.0, OpenAPI 3.0) in docs/ and the Go and TypeScript clients' types
	$(GO) tool swag init -g routes.go -d internal/http,internal/http/httpapi,internal/http/dataplane,internal/http/processes,internal/http/controlplane,internal/http/events -o docs --outputTypes go,json,yaml --parseInternal --requiredByDefault
	$(GO) run ./internal/openapi/cmd/gen -dir docs
	@# swag and gen format docs.go already; this keeps `make lint` green if they ever do not.
	gofmt -w docs/docs.go
	$(GO) generate ./clients/go/tether
	$(GO) generate ./internal/e2b/envdpb
	npm --prefix clients/typescript ci --no-audit --no-fund
	npm --prefix clients/typescript run generate

openapi-lint: ## Lint docs/openapi.yaml with the pinned Spectral (also a test in make test)
	cd tools/openapi-lint && npm ci --no-audit --no-fund && npx --no-install spectral lint --ruleset ../../docs/.spectral.yaml --fail-severity=warn ../../docs/openapi.yaml

console-vendor: ## Copy xterm.js (the console's terminal), at the version pinned in internal/http/console/package-lock.json, into the console's static/vendor/
	scripts/console-vendor.sh

$(GOLANGCI_LINT):
	@echo "building golangci-lint $(GOLANGCI_LINT_VERSION) into bin/ (once)"
	@mkdir -p bin/.golangci
	GOBIN=$(abspath bin/.golangci) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/.golangci/golangci-lint $@

lint: $(GOLANGCI_LINT) ## gofmt, go vet, golangci-lint (pinned) and docker-compose config (if installed)
	@unformatted=$$(find . \( -path ./.git -o -path ./.data -o -path ./.tether -o -path ./bin \) -prune -o -name '*.go' -print | xargs -r gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "gofmt: these files need formatting (gofmt -w):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags '$(TAGS)' ./...
	$(GOLANGCI_LINT) run --allow-parallel-runners
	@if command -v docker-compose >/dev/null 2>&1; then \
		echo "docker-compose config -q"; docker-compose config -q; \
	else \
		echo "note: docker-compose not installed; compose.yaml not checked"; \
	fi

build: ## Build the server to bin/tether, with every provider (TAGS=kubernetes,nomsgpack), and the ops commands to bin/tetherctl beside it
	$(GO) build -tags '$(TAGS)' -o $(BIN) ./cmd/api
	$(GO) build -o $(dir $(BIN))tetherctl ./cmd/tetherctl

pg-stop: ## Stop the local Postgres clusters: dev, test, chaos and bench; data stays in .data/
	@for c in dev test chaos bench; do scripts/postgres.sh stop $$c; done
