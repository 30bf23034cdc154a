# kiev's two entry points: `make demo` runs the quickstart with no outside
# servers; `make test` runs every check CI runs.
GO ?= go

.PHONY: demo test vet fmt bench overload fuzz

demo:
	$(GO) run ./examples/quickstart

test: fmt vet
	$(GO) test -race -count=1 ./...
	# Allocation guards skip under -race; run them once without it.
	$(GO) test -count=1 -run 'Alloc' ./...
	# bench/ is a module of its own: vet it and run its end-to-end test.
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...

vet:
	$(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 .

# overload runs the avalanche benchmark (bench/overload), about 3 minutes.
overload:
	cd bench && $(GO) run ./overload

# fuzz runs each fuzz target for FUZZTIME (default 30s).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(FUZZTIME) ./internal/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzMsgpackUnmarshal$$' -fuzztime $(FUZZTIME) ./codec/
	$(GO) test -run '^$$' -fuzz '^FuzzProtobufUnmarshal$$' -fuzztime $(FUZZTIME) ./codec/
