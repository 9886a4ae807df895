# goroce: a pure-Go RoCEv2 stack. `make run` shows it working, `make test`
# checks it. Longer suites have their own targets.
GO       ?= go
PKGS     := ./...
FUZZTIME ?= 30s
BENCHTIME ?= 1s

.PHONY: all build run test vet vet-cross lint fmt-check race bench ccbench fuzz interop vmbench soak clean

all: build

build:
	$(GO) build $(PKGS)

# The main job: a client and a server exchanging data over loopback UDP,
# pure Go, no privileges.
run:
	$(GO) run ./cmd/roce demo

test: fmt-check vet vet-cross lint race

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# Every package builds for the other systems goroce's users run: their
# Linux-only parts sit behind _linux.go / _others.go pairs.
vet-cross:
	GOOS=darwin $(GO) vet $(PKGS)
	GOOS=windows $(GO) vet $(PKGS)

# staticcheck over every package (.ci/lint; pinned, fetched by go run).
lint:
	GO=$(GO) ./.ci/lint

# libgoroce's tests run C programs on the soft device, some of which
# (udpong's echo) resend what is not answered within a millisecond: they
# run after the other packages, not beside stress and qp on the same cores.
race:
	$(GO) test -race -timeout 20m $$($(GO) list $(PKGS) | grep -v '/libgoroce$$')
	@l=$$($(GO) list $(PKGS) | grep '/libgoroce$$'); \
	  if [ -n "$$l" ]; then echo "$(GO) test -race -timeout 20m $$l"; $(GO) test -race -timeout 20m $$l; fi
	@# The cgo backend too, where libibverbs' headers are installed, and
	@# its rdma_cm (hwverbs/rdmacm) where librdmacm's are too (their device
	@# tests skip without a device; make interop runs them on rxe).
	@if [ -e /usr/include/infiniband/verbs.h ]; then \
	  p=./hwverbs; [ -e /usr/include/rdma/rdma_cma.h ] && p=./hwverbs/...; \
	  echo "$(GO) vet -tags hwverbs $$p"; $(GO) vet -tags hwverbs $$p || exit 1; \
	  echo "$(GO) test -race -tags hwverbs $$p"; $(GO) test -race -tags hwverbs $$p; \
	else echo "skipping -tags hwverbs: no libibverbs-dev"; fi

# The Go benchmarks, then the end-to-end comparison: roce perf between two
# processes against the raw-UDP baseline (roce help bench).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)
	$(GO) build -o bin/roce ./cmd/roce
	bin/roce bench --json bin/bench.json

# Congestion control on a shared bottleneck (roce help ccbench): goroce with
# and without it against kernel TCP cubic and bbr, in network namespaces
# (root). CCBENCH_D seconds a run (about 40 runs); the figures go to
# bin/ccbench.json and the incast figure to bin/ccbench-incast.svg.
CCBENCH_D ?= 10
ccbench:
	$(GO) build -o bin/roce ./cmd/roce
	bin/roce ccbench -D $(CCBENCH_D) --json bin/ccbench.json --svg bin/ccbench-incast.svg $(CCBENCH_ARGS)

# The long versions of the stress suite (stress/, RELIABILITY.md): the
# soak for SOAK (an hour; SOAK=15m for less), a quarter of it at each fault
# level, and the flood, key-guessing and exhaustion cases at their long
# sizes. make test runs the short versions.
SOAK ?= 1h
soak:
	@mkdir -p bin
	GOROCE_SOAK=$(SOAK) $(GO) test -v -count=1 -timeout 0 ./stress | tee bin/soak.log

# Runs every fuzz target for FUZZTIME each.
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# Interoperability with the Linux kernel's soft-RoCE (rxe) and rdma-core's
# tools in QEMU VMs (Debian 13 guests, then a smaller run on Debian 12's),
# hwverbs on rxe, and goroce next to rxe in the same VMs;
# needs root. See interop/README.md. Exit 77: skipped.
interop:
	./interop/all.sh

# Only goroce and rxe side by side in the lab VMs (bandwidth, latency).
vmbench:
	./interop/vmbench.sh

clean:
	$(GO) clean -testcache
