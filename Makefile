# kiev's two entry points: `make demo` runs the quickstart with no outside
# servers; `make test` installs and starts the real servers the tests need
# (scripts/services.sh) and runs every check CI runs against them. `make
# check` is the everyday one: gofmt, vet and go test -race, no servers.
GO ?= go
SHELL := /bin/bash

# Every go command here runs in the workspace of go.work, committed at the
# top of the repository: the satellite modules require kiev (and each
# other) at the version they will be published at, which only the
# workspace resolves to this checkout (docs/modules.md). Exporting GOWORK
# makes that hold whatever the caller's environment says. The steps that
# must not see the workspace say GOWORK=off themselves: the published
# modules' check (scripts/modules.sh), the cross-version test's builds of
# earlier commits (internal/xversion) and FerretDB's build
# (scripts/services.sh).
export GOWORK := $(CURDIR)/go.work

# WITH_SERVICES exports the servers' addresses for the command after it.
WITH_SERVICES = eval "$$(bash scripts/services.sh env)" &&

# The repository's Go modules besides kiev's own (the root) and bench/: the
# database and config clients, each a module so that kiev's go.mod requires
# only what the core uses, and the example that uses them; make test's race
# pass tests them. The integrations with heavy dependencies, each a module
# too, have steps of their own (test-etcd, test-otelkiev). make test builds
# and vets every module; go.work lists them all.
SUBMODULES = clients/config clients/redis clients/mysql clients/mongo examples/backend
INTEGRATIONS = registry/etcd otelkiev

.PHONY: demo test check vet vet-submodules vet-peers build-race fmt bench compare overload fuzz services services-down \
	test-prep test-race test-race-zk test-zk-failover test-etcd test-norace test-xversion test-bench test-otelkiev test-modules test-end

demo:
	$(GO) run ./examples/quickstart

# make test runs these steps in turn; each is a target of its own, which
# can be run alone once `make services` is up:
#   test-prep         scripts/services.sh up, and beside it go build -race
#                     ./... in every module (which compiles the race
#                     passes' packages), gofmt, and go vet of every module
#   test-race         go test -race, every package but the ZooKeeper registry
#   test-race-zk      go test -race, the ZooKeeper registry
#   test-zk-failover  the ZooKeeper failover tests, without -race, one
#                     package at a time
#   test-etcd         go test -race -v, registry/etcd's module, with its
#                     failure tests' figures
#   test-norace       the allocation guards and the memory tests (TestManySlowReaders, TestManyIdleConnections, TestPipelinerThatNeverReads)
#   test-xversion     the cross-version test: kiev of earlier commits
#                     against today's (internal/xversion)
#   test-bench        bench/'s end-to-end tests, and bench/peers' (rpcx, arpc, kitex)
#   test-otelkiev     go test -race in otelkiev/, on the real OpenTelemetry SDK
#   test-modules      the modules as a user fetches them: examples/backend
#                     built outside the repository, without go.work, from a
#                     module proxy directory made from this checkout
#                     (scripts/modules.sh)
# The go test steps do not overlap: the comments above them say why each
# needs the machine to itself.
#
# It prints a line as each step starts and ends, "make test: [ 42s] ...",
# the seconds counted from its start, and one every 30 s through a silent
# stretch, naming what is running. When it ends, pass or fail, it stops the
# services that scripts/services.sh started for it, unless KEEP_SERVICES=1;
# those that already answered when it began (a `make services` of your own,
# the machine's Redis and MariaDB) are left as they were.
KEEP_SERVICES ?=

# SUBMAKE runs make test's steps. Recipe lines that name $(MAKE) itself run
# even under make -n, which would start the services.
SUBMAKE = $(MAKE) --no-print-directory

# KIEV_T0, the start of make test, reaches the sub-makes and services.sh.
ifeq ($(KIEV_T0),)
export KIEV_T0 := $(shell date +%s)
endif

# PROGRESS defines the shell functions behind make test's progress lines:
#   say WHAT       prints "make test: [ 42s] WHAT"
#   step WHAT      says "WHAT ..." and notes WHAT as the step running
#   done_step      says "WHAT: ok (Ns)" of the step running
#   run WHAT CMD   runs CMD as a step, saying its start and its end
#   busy PID       prints "; running X, Y": the test binaries, compilers,
#                  linkers, vet, java and apt among PID's descendants
#   ticker PID     says what step runs, and busy PID, whenever nothing was
#                  said for 30 s
# The notes live in $KIEV_TEST_DIR, which the test target makes.
PROGRESS = \
	say() { \
		printf 'make test: [%3ds] %s\n' $$(( $$(date +%s) - $${KIEV_T0:-$$(date +%s)} )) "$$*"; \
		if [ -n "$${KIEV_TEST_DIR:-}" ]; then touch "$$KIEV_TEST_DIR/said"; fi; \
	}; \
	step() { \
		if [ -n "$${KIEV_TEST_DIR:-}" ]; then echo "$$(date +%s) $$*" >"$$KIEV_TEST_DIR/step"; fi; \
		say "$$* ..."; \
	}; \
	done_step() { \
		local since what; \
		if read -r since what 2>/dev/null <"$${KIEV_TEST_DIR:-/nonexistent}/step"; then \
			say "$$what: ok ($$(( $$(date +%s) - since ))s)"; \
		else say "ok"; fi; \
	}; \
	run() { \
		local what=$$1 t=$$(date +%s) rc=0; shift; \
		step "$$what"; \
		"$$@" || rc=$$?; \
		if (( rc == 0 )); then say "$$what: ok ($$(( $$(date +%s) - t ))s)"; \
		else say "$$what: FAILED (exit $$rc)"; fi; \
		return $$rc; \
	}; \
	busy() { \
		ps -e -o pid=,ppid=,comm= | awk -v root="$$1" ' \
			{ up[$$1] = $$2; name[$$1] = $$3 } \
			END { \
				for (p in up) { \
					c = name[p]; \
					if (c !~ /\.test$$|^(compile|link|vet|java|apt-get|dpkg)$$/) continue; \
					for (q = up[p]; q in up && q != root; q = up[q]) ; \
					if (q == root) n[c]++; \
				} \
				for (c in n) { s = s sep c (n[c] > 1 ? " (" n[c] ")" : ""); sep = ", " } \
				if (s != "") printf "; running %s", s; \
			}'; \
	}; \
	ticker() { \
		local now last since what; \
		while sleep 5; do \
			now=$$(date +%s); \
			last=$$(stat -c %Y "$$KIEV_TEST_DIR/said" 2>/dev/null || echo "$$now"); \
			if (( now - last >= 30 )) && read -r since what 2>/dev/null <"$$KIEV_TEST_DIR/step"; then \
				say "$$what: still running after $$(( now - since ))s$$(busy "$$1")"; \
			fi; \
		done; \
	}

test:
	@$(PROGRESS); \
	export KIEV_TEST_DIR=$$(mktemp -d "$${TMPDIR:-/tmp}/kiev-test.XXXXXX"); \
	export KIEV_SERVICES_STARTED=$$KIEV_TEST_DIR/started; \
	say "starting"; \
	ticker $$$$ & ticker=$$!; \
	trap 'rc=$$?; kill $$ticker 2>/dev/null; \
		$(SUBMAKE) test-end TEST_RC=$$rc; rm -rf "$$KIEV_TEST_DIR"; exit $$rc' EXIT; \
	trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; \
	$(SUBMAKE) -j1 test-prep test-race test-race-zk test-zk-failover test-etcd test-norace test-xversion test-bench test-otelkiev test-modules

# test-prep runs three things side by side: scripts/services.sh up (apt, and
# FerretDB's first build); go build -race ./... in every module (etcd's
# client and grpc-go among them), which compiles what the race passes need;
# and the checks that need no server (gofmt, then go vet of every module).
# Where the Go caches are empty, each compiles for minutes,
# and together they keep both cores busy. If anything fails, it stops the
# others; test-end then stops the services that services.sh had started.
test-prep:
	@$(PROGRESS); \
	say "scripts/services.sh up, and beside it go build -race and the checks"; \
	bash scripts/services.sh up & up=$$!; \
	run "go build -race ./..., every module" $(SUBMAKE) build-race & race=$$!; \
	trap 'kill $$up $$race 2>/dev/null; wait' EXIT; \
	trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; \
	run gofmt $(SUBMAKE) -s fmt && \
	run "go vet ./..." $(GO) vet ./... && \
	run "go vet ./... in bench/" $(GO) -C bench vet ./... && \
	run "go vet ./... in bench/peers/" $(SUBMAKE) vet-peers && \
	run "go vet ./... in $(SUBMODULES) $(INTEGRATIONS)" $(SUBMAKE) vet-submodules || exit; \
	step "waiting for go build -race and scripts/services.sh up"; \
	wait $$race || exit; race=; \
	rc=0; wait $$up || rc=$$?; trap - EXIT; \
	if (( rc )); then say "scripts/services.sh up: FAILED (exit $$rc)"; exit $$rc; fi; \
	say "scripts/services.sh up: ok, the services are ready"

# go-zookeeper/zk v1.0.4 writes its lastZxid field in its receive loop
# while its connect loop reads it to set watches again after a reconnect
# (upstream go-zookeeper/zk#35, not fixed in any release), so the race
# detector flags tests that make a ZooKeeper client reconnect, at random.
# It can flag a first connection too, when the connecting goroutine is
# held up past the client's first watches (seen once in CI, in the config
# client's TestZKNodeData, and once in the registry's TestConformance beside
# four other packages' tests, with zkconn.Settle in place). Those tests,
# and the config client's ZooKeeper tests, which set watches as soon as
# they connect, run in a pass of their own without -race (test-zk-failover).
# Every other test runs with it; kiev's ZooKeeper registry in a pass of its
# own, so that no other package's tests hold up its connections' goroutines,
# and the cross-version test in test-xversion.
#
# The passes select by package. Three packages hold ZooKeeper failover
# tests, and each has its own list of them, applied to it alone: the root
# package's are TestZooKeeper* (zookeeper_test.go and
# zookeeper_ensemble_test.go), the registry's are named below, and the
# config client's are TestZK* and TestZooKeeper*. Every other package runs
# all its tests with -race: a list no longer reaches a package it was not
# written for (one shared list had skipped the database clients'
# TestServerRestart and the MongoDB client's TestUnreachable everywhere).
ZK_FAILOVER_ROOT = ^TestZooKeeper
ZK_FAILOVER_REGISTRY = ^(TestSessionExpiry|TestServerRestart|TestConnectionCut|TestCloseCutOff|TestUnreachable)$$
ZK_FAILOVER_CONFIG = ^(TestZK|TestZooKeeper)
# The root module's packages but the root package itself, the ZooKeeper
# registry (test-race-zk) and the cross-version test (test-xversion).
ROOT_SUBPACKAGES = $$($(GO) list ./... | grep -v -x -e 'github.com/kievrpc/kiev' -e '.*/registry/zookeeper' -e '.*/internal/xversion')
# The modules whose tests have no ZooKeeper failover test: all their tests
# run with -race.
PLAIN_SUBMODULES = $(filter-out clients/config,$(SUBMODULES))

test-race:
	@$(PROGRESS); step "go test -race, the root module but the ZooKeeper registry"
	$(WITH_SERVICES) $(GO) test -race -count=1 -timeout 20m -skip '$(ZK_FAILOVER_ROOT)' . $(ROOT_SUBPACKAGES)
	@$(PROGRESS); done_step
	@$(PROGRESS); step "go test -race in $(SUBMODULES)"
	$(WITH_SERVICES) $(GO) -C clients/config test -race -count=1 -timeout 10m -skip '$(ZK_FAILOVER_CONFIG)' ./...
	$(WITH_SERVICES) for m in $(PLAIN_SUBMODULES); do \
		$(GO) -C $$m test -race -count=1 -timeout 10m ./... || exit; done
	@$(PROGRESS); done_step

test-race-zk:
	@$(PROGRESS); step "go test -race, the ZooKeeper registry"
	$(WITH_SERVICES) $(GO) test -race -count=1 -timeout 10m -skip '$(ZK_FAILOVER_REGISTRY)' ./registry/zookeeper/
	@$(PROGRESS); done_step

# -v shows the failover figures the tests measure; the filter drops the
# ZooKeeper client's chatter. One package at a time: each stops, restarts
# and partitions ZooKeeper servers and freezes provider processes, and
# their timing bounds assume a machine not doing the same for another
# package at once. The root package's TestZooKeeperEnsemble* (matched by TestZooKeeper)
# kill, stop and cut off members of three-member ensembles of their own, in
# about 45 s, and print their figures on "figure: " lines (RELIABILITY.md).
test-zk-failover:
	@$(PROGRESS); step "go test -v, the ZooKeeper failover tests, one package at a time"
	set -o pipefail; $(WITH_SERVICES) $(GO) test -count=1 -timeout 10m -run '$(ZK_FAILOVER_ROOT)' -v . \
		| grep --line-buffered -vE '^=== (RUN|PAUSE|CONT)|level=(DEBUG|INFO)|"level":"(DEBUG|INFO)"'
	set -o pipefail; $(WITH_SERVICES) $(GO) test -count=1 -timeout 10m -run '$(ZK_FAILOVER_REGISTRY)' -v ./registry/zookeeper/ \
		| grep --line-buffered -vE '^=== (RUN|PAUSE|CONT)|level=(DEBUG|INFO)|"level":"(DEBUG|INFO)"'
	set -o pipefail; $(WITH_SERVICES) $(GO) -C clients/config test -count=1 -timeout 10m -run '$(ZK_FAILOVER_CONFIG)' -v ./... \
		| grep --line-buffered -vE '^=== (RUN|PAUSE|CONT)|level=(DEBUG|INFO)|"level":"(DEBUG|INFO)"'
	@$(PROGRESS); done_step

# registry/etcd is a module of its own (test-prep vets it). Its tests run
# against the shared etcd and private ones they stop, restart, wipe and
# partition, and a provider process they kill; -v shows their figures, and
# the filter drops the registries' Debug and Info lines.
test-etcd:
	@$(PROGRESS); step "go test -race -v, the etcd registry's module"
	set -o pipefail; $(WITH_SERVICES) $(GO) -C registry/etcd test -race -count=1 -timeout 10m -v ./... \
		| grep --line-buffered -vE '^=== (RUN|PAUSE|CONT)|level=(DEBUG|INFO)|"level":"(DEBUG|INFO)"'
	@$(PROGRESS); done_step

# Allocation guards and the many-slow-readers test (bounds on memory and
# latency) skip under -race: run them once without it.
test-norace:
	@$(PROGRESS); step "go test without -race, the allocation guards and the memory tests"
	$(GO) test -p 1 -count=1 -run 'Alloc|TestManySlowReaders|TestManyIdleConnections|TestPipelinerThatNeverReads' ./...
	$(WITH_SERVICES) for m in $(SUBMODULES); do $(GO) -C $$m test -count=1 -run 'Alloc' ./... || exit; done
	@$(PROGRESS); done_step

# The cross-version test builds kiev's peer of internal/xversion from this
# tree and from the commits pinned in its build_test.go (checked out with
# git worktree from the clone's history; built once into
# ~/.cache/kiev-xversion), runs each against the others over TCP and UDP
# with both codecs, and prints the matrix (-v; the filter drops the lines
# of each passing subtest). It runs alone: it starts a dozen processes and
# its drains time their calls.
test-xversion:
	@$(PROGRESS); step "go test -race -v, the cross-version test"
	set -o pipefail; $(GO) test -race -count=1 -timeout 10m -v ./internal/xversion/ \
		| grep --line-buffered -vE '^ *(=== (RUN|PAUSE|CONT|NAME)|--- PASS)'
	@$(PROGRESS); done_step

# bench/ is a module of its own (test-prep vets it): run its end-to-end
# tests, which run the comparison and the avalanche benchmark on short
# windows. bench/peers (rpcx, arpc and kitex) is one more, outside go.work
# so that its dependencies stay out of every other module: its tests, and
# compare's run of it beside kiev (KIEV_PEERS=1), which build it from the
# module proxy, or from sources.sh's peers.mod where the proxy refuses it.
test-bench:
	@$(PROGRESS); step "go test in bench/, and bench/peers beside it"
	cd bench && KIEV_PEERS=1 $(GO) test -count=1 ./...
	cd bench/peers && GOWORK=off $(GO) test -count=1 $$(test -f peers.mod && echo -modfile=peers.mod) ./...
	@$(PROGRESS); done_step

# otelkiev/ is a module of its own, so that kiev's go.mod does not require
# the OpenTelemetry SDK (test-prep vets it): its tests, with -race, need no
# server.
test-otelkiev:
	@$(PROGRESS); step "go test -race in otelkiev/"
	cd otelkiev && $(GO) test -race -count=1 ./...
	@$(PROGRESS); done_step

# The modules as published (scripts/modules.sh, docs/modules.md): go
# install examples/backend, and go get every other module, in an empty
# directory with GOWORK=off, from a module proxy directory made from this
# checkout. About 25 s once its module cache holds the dependencies.
test-modules:
	@$(PROGRESS); step "the modules as a user fetches them (scripts/modules.sh)"
	bash scripts/modules.sh
	@$(PROGRESS); done_step

# test-end, run by the test target as it exits, stops the services that
# make test started (listed in $KIEV_SERVICES_STARTED by services.sh up)
# unless KEEP_SERVICES is set, and says how make test ended (TEST_RC).
test-end:
	@$(PROGRESS); \
	started=$$(sort -u "$${KIEV_SERVICES_STARTED:-/nonexistent}" 2>/dev/null | xargs); \
	if [ -z "$$started" ]; then \
		say "services: make test started none (those it used were running before it); all left as they were"; \
	elif [ -n "$(KEEP_SERVICES)" ] && [ "$(KEEP_SERVICES)" != 0 ]; then \
		say "services: kept $$started running (KEEP_SERVICES=$(KEEP_SERVICES)); stop them with: make services-down"; \
	else \
		say "services: stopping $$started, which make test started (KEEP_SERVICES=1 keeps them)"; \
		if bash scripts/services.sh down $$started; then say "services: stopped $$started"; \
		else say "services: scripts/services.sh down $$started failed"; fi; \
	fi; \
	how=FAILED; \
	case "$(TEST_RC)" in 0) how=passed;; 129|130|143) how="stopped by a signal";; esac; \
	if [ "$$how" != passed ] && read -r since what 2>/dev/null <"$${KIEV_TEST_DIR:-/nonexistent}/step"; then \
		how="$$how in: $$what"; fi; \
	say "$$how"

# check is the everyday check, with no server: gofmt, go vet of every
# module, and go test -race of every package of every module but bench/
# (its tests run benchmarks) and the cross-version test (which must run
# alone, and builds earlier commits), with the servers' addresses unset so
# that the tests that need one skip (make test runs them). Go's test cache
# stays on: CHECKFLAGS=-count=1 runs every test again.
# CHECK_PKGS are the packages make check tests, of every module in one
# list (the workspace lets one go command build them all, two at a time).
CHECK_PKGS = $$($(GO) list ./... $(patsubst %,./%/...,$(SUBMODULES) $(INTEGRATIONS)) | grep -v '/internal/xversion$$')

check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./... $(patsubst %,./%/...,bench $(SUBMODULES) $(INTEGRATIONS))
	unset $$(compgen -e | grep '^KIEV_'); $(GO) test -race $(CHECKFLAGS) $(CHECK_PKGS)

# build-race compiles what the race passes need, in every module.
build-race:
	@$(GO) build -race ./...
	@for m in $(SUBMODULES) $(INTEGRATIONS); do $(GO) -C $$m build -race ./... || exit; done

vet: vet-submodules vet-peers
	$(GO) vet ./...
	$(GO) -C bench vet ./...

# bench/peers is outside go.work (see test-bench).
vet-peers:
	cd bench/peers && GOWORK=off $(GO) vet $$(test -f peers.mod && echo -modfile=peers.mod) ./...

vet-submodules:
	@for m in $(SUBMODULES) $(INTEGRATIONS); do $(GO) -C $$m vet ./... || exit; done

# services installs (if needed) and starts the servers the tests need
# (scripts/services.sh up), and leaves them running; services-down stops
# those that services.sh started.
services:
	bash scripts/services.sh up

services-down:
	bash scripts/services.sh down

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 .

# compare measures kiev beside net/rpc, grpc-go and raw TCP (bench/compare),
# about 8 minutes; it prints Markdown and writes charts to bench/out/.
compare:
	cd bench && $(GO) run ./compare

# overload runs the avalanche benchmark (bench/overload): its four workloads
# (cpu, io, mixed, neighbour) for every system, about 10 minutes.
overload:
	cd bench && $(GO) run ./overload -pin

# fuzz runs each fuzz target for FUZZTIME (default 30s).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(FUZZTIME) ./internal/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzMsgpackUnmarshal$$' -fuzztime $(FUZZTIME) ./codec/
	$(GO) test -run '^$$' -fuzz '^FuzzProtobufUnmarshal$$' -fuzztime $(FUZZTIME) ./codec/
	$(GO) test -run '^$$' -fuzz '^FuzzMsgpackFast$$' -fuzztime $(FUZZTIME) ./codec/
	$(GO) test -run '^$$' -fuzz '^FuzzMsgpackEncode$$' -fuzztime $(FUZZTIME) ./codec/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeNode$$' -fuzztime $(FUZZTIME) ./registry/
	$(GO) test -run '^$$' -fuzz '^FuzzParseDatagram$$' -fuzztime $(FUZZTIME) ./internal/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzHTTPJSON$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzDecompress$$' -fuzztime $(FUZZTIME) ./internal/transport/
	$(GO) test -run '^$$' -fuzz '^FuzzServerStreamFrames$$' -fuzztime $(FUZZTIME) ./internal/transport/
	$(GO) test -run '^$$' -fuzz '^FuzzParseHeader$$' -fuzztime $(FUZZTIME) ./internal/wire/
	$(GO) -C clients/redis test -run '^$$' -fuzz '^FuzzDescribe$$' -fuzztime $(FUZZTIME) .
	$(GO) -C clients/mysql test -run '^$$' -fuzz '^FuzzOptions$$' -fuzztime $(FUZZTIME) .
	$(GO) -C clients/mongo test -run '^$$' -fuzz '^FuzzSummarize$$' -fuzztime $(FUZZTIME) .
	for f in FuzzApolloConfig FuzzApolloNotifications FuzzZKNode FuzzSnapshotFile FuzzDecode; do \
		$(GO) -C clients/config test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) . || exit 1; done
