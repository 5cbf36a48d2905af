# Trawl: build, test, run, bench. Every target works on a fresh machine with Go installed;
# `make run` and `make test` install what they need with apt-get when it is missing (as root):
# redis-server for both, chromium for the status page's browser test and the Docker CLI for
# `docker compose config` (`make compose-test`: a Docker engine, docker-compose,
# debootstrap); otherwise they name the packages to install.

SERVICES   := scheduler fetcher parser dedup archiver renderer
MODULES    := shared shared/itest devstack $(addprefix services/,$(SERVICES)) $(addsuffix /itest,$(addprefix services/,$(SERVICES))) trawlctl examples/indexer
PKGS       := $(addsuffix /...,$(addprefix ./,$(MODULES)))
BIN        := bin
GO         ?= go
TEST_FLAGS ?= -count=1 -timeout 25m
# End-to-end tests run the services as separate binaries; their process only hosts the
# embedded NATS server, whose own internals the race detector would be testing.
E2E        := ./devstack/e2e/...
# End-to-end tests at once: each runs its own stack and web, and spends most of its time
# waiting on leases, restarts and politeness delays rather than on the CPU.
E2E_PARALLEL ?= 4
# Packages tested at once: the integration packages mostly wait on their servers, leases
# and retries, so twice the cores keeps the CPU busy.
TEST_PACKAGES ?= 4
# Tests of one package at once: their parallel tests start their own servers and wait on
# them; those whose assertions hold a wall-clock bound do not call t.Parallel.
TEST_PARALLEL ?= 4
# The end-to-end tests and the integration module make test leaves to make test-policy-render.
POLICY_RENDER_E2E := ^(TestPolicy|TestRender)
# The end-to-end tests make test leaves to make test-stores: the two longest (a minute and a
# half each), which run the crawl on store clusters and from store files copied apart.
STORES_E2E        := ^(TestCrawlOnClusters|TestCrawlSurvivesStoresRolledBackApart)$$
RENDER_ITEST      := /services/renderer/itest
# The service images' builds replayed with this host's go (a minute of CPU on two cores):
# make compose-test runs them, before building the same images with Docker.
IMAGES_TEST       := ^TestImagesBuild$$
BENCH_TIME ?= 1s

# -trimpath keeps the checkout's path out of what is compiled, so a clone elsewhere (CI's,
# a second worktree) reuses the build cache's packages instead of compiling them again.
export GOFLAGS ?= -buildvcs=false -trimpath

.PHONY: all build test test-policy-render test-stores vet run bench bench-scale bench-scale-ci bench-scale-wide fuzz unit tidy clean interop docs-crawl compose-test archive-test s3-test k8s-test

all: build

## build: the service binaries, the local runner, its NATS server and trawlctl, into bin/
build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./services/,$(SERVICES))
	$(GO) build -o $(BIN)/ ./devstack/cmd/trawl-dev ./devstack/cmd/trawl-nats ./trawlctl

vet:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## test: unit, integration (real NATS JetStream + redis-server) and end-to-end tests, but for those
## of live site policies and rendering end to end and the renderer's own integration tests (make
## test-policy-render, which CI runs next), the crawl on store clusters and from store files
## copied apart (make test-stores, CI's third) and the images' builds replayed without Docker
## (make compose-test), so that the edit-test loop stays under ten minutes
test: vet
	@$(GO) run ./devstack/cmd/trawl-deps redis-server chromium docker
	$(GO) test -race -p $(TEST_PACKAGES) -parallel $(TEST_PARALLEL) $(TEST_FLAGS) -skip '$(IMAGES_TEST)' $$($(GO) list $(PKGS) | grep -v -e /devstack/e2e -e $(RENDER_ITEST))
	$(GO) test $(TEST_FLAGS) -parallel $(E2E_PARALLEL) -skip '$(POLICY_RENDER_E2E)|$(STORES_E2E)' $(E2E)

## test-policy-render: live site policies and rendering end to end (each judged from the synthetic
## web's own request log) and the renderer's integration tests with a real Chromium
test-policy-render: vet
	@$(GO) run ./devstack/cmd/trawl-deps redis-server chromium
	$(GO) test -race $(TEST_FLAGS) ./services/renderer/itest/...
	$(GO) test $(TEST_FLAGS) -run '$(POLICY_RENDER_E2E)' $(E2E)

## test-stores: the crawl end to end on a NATS cluster at three replicas and a Redis Cluster
## (devstack/e2e TestCrawlOnClusters), and restarted from NATS and Redis files copied at two
## instants apart, as an OS crash rolls each store back to its own last fsync
## (TestCrawlSurvivesStoresRolledBackApart); each judged from the synthetic web's own log
test-stores: vet
	@$(GO) run ./devstack/cmd/trawl-deps redis-server
	$(GO) test $(TEST_FLAGS) -parallel $(E2E_PARALLEL) -run '$(STORES_E2E)' $(E2E)

## interop: the archiver's WARC files read back by warcio.js, Webrecorder's reader (installs
## node, npm and warcio when missing)
interop: build
	@$(GO) run ./devstack/cmd/trawl-deps redis-server node npm
	cd devstack/warcio && npm ci --no-audit --no-fund --silent
	$(GO) test -tags interop -count=1 -run TestArchiveReadByWarcio -v ./devstack/e2e/

## archive-test: a crawl's WARC files packaged as WACZ (shared/wacz) and replayed for real by
## ReplayWeb.page (its npm package, version in devstack/replayweb/VERSION, unpacked there) in
## headless Chromium (installs node, npm, chromium and the package when missing)
REPLAYWEB := devstack/replayweb
archive-test: build
	@$(GO) run ./devstack/cmd/trawl-deps redis-server chromium node npm
	@v=$$(cat $(REPLAYWEB)/VERSION); if [ "$$(cat $(REPLAYWEB)/package/.version 2>/dev/null)" != "$$v" ]; then \
		rm -rf $(REPLAYWEB)/package && cd $(REPLAYWEB) && npm pack --silent replaywebpage@$$v >/dev/null && \
		tar xzf replaywebpage-$$v.tgz && rm replaywebpage-$$v.tgz && echo "$$v" > package/.version; fi
	$(GO) test -tags replay -count=1 -timeout 15m -run TestWACZReplay -v ./devstack/e2e/

## s3-test: the archiver's sealed files uploaded to a real S3-compatible store, SeaweedFS (`weed
## mini`, built from its Go module once and cached in the user's cache directory, a few minutes
## the first time), which is killed mid-upload and started again: the upload resumes
s3-test:
	@$(GO) run ./devstack/cmd/trawl-deps redis-server
	$(GO) run ./devstack/cmd/trawl-weed
	$(GO) test -tags s3 -count=1 -p 1 -timeout 40m -v -run 'TestUpload|TestArchiverUploads' ./services/archiver/itest/

## k8s-test: the Helm chart on a real single-node Kubernetes cluster (devstack/k8scluster: etcd,
## kube-apiserver, controller manager, scheduler, kubelet with containerd, kube-proxy, CNI
## bridge), built from their Go modules once and cached in the user's cache directory (minutes
## the first time), started as root; the images built with the Docker engine and imported into
## the node; crawls judged from the synthetic web's own log, one with pods deleted, fetchers
## scaled and upgraded mid-crawl (devstack/k8stest)
k8s-test:
	@$(GO) run ./devstack/cmd/trawl-deps containerd runc cni iptables dockerd debootstrap
	$(GO) run ./devstack/cmd/trawl-k8s
	$(GO) vet -tags k8s ./devstack/k8stest/
	$(GO) test -tags k8s -count=1 -p 1 -timeout 60m -v ./devstack/k8stest/

## docs-crawl: real documentation no one here wrote (Debian's Python, PostgreSQL, Git and Debian
## Reference packages) served by nginx with gzip on, crawled by `make run` with the archiver and
## judged from nginx's access log; the WARC files are read back by warcio.js (installs nginx,
## the packages, node, npm and warcio when missing)
docs-crawl: build
	@$(GO) run ./devstack/cmd/trawl-deps redis-server nginx node npm
	cd devstack/warcio && npm ci --no-audit --no-fund --silent
	$(GO) test -tags docscrawl -count=1 -timeout 30m -run TestCrawlRealDocs -v ./devstack/docsweb/

## compose-test: compose.yaml on a real Docker engine with Compose v2 and docker-compose 1.29, every
## profile's crawl judged from a synthetic web's own request log (devstack/composetest), after the
## images' builds replayed with this host's go (devstack/composecheck TestImagesBuild). Installs
## docker.io, docker-compose and debootstrap when missing, starts dockerd when no engine answers
## (as root), builds Compose v2 as a CLI plugin when the CLI has none, builds local stand-ins
## for the base images no registry serves, and at its end removes the untagged images earlier runs' builds left
compose-test:
	$(GO) test -count=1 -run '$(IMAGES_TEST)' ./devstack/composecheck/
	@$(GO) run ./devstack/cmd/trawl-deps dockerd docker-compose debootstrap
	$(GO) vet -tags compose ./devstack/composetest/ ./devstack/dockerhost/
	$(GO) test -tags compose -count=1 -timeout 5m ./devstack/dockerhost/
	$(GO) test -tags compose -count=1 -timeout 60m -v ./devstack/composetest/

## run: crawl SEEDS (space- or comma-separated) or the built-in demo web, then print a summary; RENDERERS=N runs N renderers (rendering on, auto); DIR=path keeps the crawl there and resumes it;
## PARK_AFTER=2m ends once only hosts due later than that remain, listing them and leaving them queued for a later run with the same DIR
run: build
	$(BIN)/trawl-dev -bin $(BIN) $(if $(SEEDS),-seeds "$(SEEDS)") $(if $(FETCHERS),-fetchers $(FETCHERS)) $(if $(RENDERERS),-renderers $(RENDERERS)) $(if $(DIR),-dir "$(DIR)") $(if $(PARK_AFTER),-park-after $(PARK_AFTER))

## bench: whole-pipeline pages/s, coverage, politeness violations and CPU-ms per page per process at
## the shipped defaults on a narrow and a wide synthetic web, beside Colly v2 and a bare
## fetch-and-parse loop on the same web, and the other TRAWL_FSYNC level beside them
## (devstack/e2e BenchmarkPipeline), with 10,000 site policies loaded against
## none, the two crawls side by side (BenchmarkPolicyRules), the dispatch pause of a policy change
## touching 100,000 queued URLs (BenchmarkPolicyChangePause), plus per-stage benchmarks
bench: build
	$(GO) test -run '^$$' -bench . -benchtime $(BENCH_TIME) -timeout 45m \
		$(PKGS)

## bench-scale: the frontier and dedup at SCALE_SIZES URLs (default 1e5,1e6,1e7; a hundred URLs a
## host) on real NATS and redis-server: ingest rate with dispatch paused, dispatch and outcome
## rates with every host due, each against the queue's size; Redis bytes per URL by key family,
## NATS bytes per URL, every process's peak and steady memory, restart times of the scheduler
## and Redis (devstack/scale TestScale; table on stdout, JSON in bench-scale.json). Fails when
## the dispatch rate at the largest size is under 80% of the smallest's. Not part of make bench
SCALE_SIZES  ?= 1e5,1e6,1e7
SCALE_ROUNDS ?= 3
bench-scale: build
	SCALE_SIZES=$(SCALE_SIZES) SCALE_ROUNDS=$(SCALE_ROUNDS) SCALE_BIN=$(abspath $(BIN)) SCALE_JSON=$(abspath bench-scale.json) \
		$(GO) test -tags scale -count=1 -timeout 120m -run '^TestScale$$' -v ./devstack/scale/

## bench-scale-wide: the synthetic web on SCALE_WIDE host addresses (default 20000; each host its
## own 127.x address behind one listener), SCALE_WIDE_PAGES pages each (10), crawled to the end by
## the whole pipeline at TRAWL_MIN_DELAY=SCALE_WIDE_DELAY (1s) with every host allowed a back
## queue: coverage, overlaps and short gaps from the web's request log, pages/s, Redis memory
## per active host, each process's peak RSS and descriptors (devstack/scale TestWide; JSON in
## bench-scale-wide.json)
SCALE_WIDE       ?= 20000
SCALE_WIDE_PAGES ?= 10
SCALE_WIDE_DELAY ?= 1s
bench-scale-wide: build
	SCALE_WIDE=$(SCALE_WIDE) SCALE_WIDE_PAGES=$(SCALE_WIDE_PAGES) SCALE_WIDE_DELAY=$(SCALE_WIDE_DELAY) SCALE_BIN=$(abspath $(BIN)) \
		SCALE_WIDE_JSON=$(abspath bench-scale-wide.json) \
		$(GO) test -tags scale -count=1 -timeout 120m -run '^TestWide$$' -v ./devstack/scale/

## bench-scale-ci: bench-scale at 10^4 URLs over 100 hosts, once (about ten seconds after the
## build): the harness still runs against the services as they are (the scheduler's pause,
## the fetcher's task and outcome contract, the key layouts it measures); no rate is judged
bench-scale-ci:
	$(MAKE) bench-scale SCALE_SIZES=1e4 SCALE_ROUNDS=1

## fuzz: a short run (FUZZTIME, default 30s) of every fuzz target in the tree, found by reading the
## test files (devstack/fuzztargets), so a new target is run without being listed here
FUZZTIME ?= 30s
fuzz:
	$(GO) run ./devstack/cmd/trawl-fuzz -fuzztime $(FUZZTIME)

## unit: the fast loop for editing: every package's tests except the integration modules (*/itest),
## the end-to-end suite and the build-tagged Docker/interop/docs-crawl tests; real servers still
## run where a package's own tests use them (a minute or two)
UNIT_PKGS = $$($(GO) list $(PKGS) | grep -v -e /itest -e /devstack/e2e)
unit:
	@$(GO) run ./devstack/cmd/trawl-deps redis-server
	$(GO) test $(TEST_FLAGS) $(UNIT_PKGS)

tidy:
	@for m in $(MODULES); do (cd $$m && $(GO) mod tidy) || exit 1; done

clean:
	rm -rf $(BIN)
