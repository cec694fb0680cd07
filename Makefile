# make packages: build rootgate's .deb and .rpm into $(DIST).
#
# The version comes from packaging/version.sh (a VERSION file, else git)
# and is stamped into both binaries, without go's VCS stamp (which root,
# building in a user's checkout as the tests do, cannot get from git: the
# tree is not its own); nfpm runs through `go run`, pinned
# here and never in go.mod. Everything else is generated from the built
# binaries themselves: the manual pages and the shell completions.

GO      ?= go
NFPM    ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
VERSION ?= $(shell packaging/version.sh)
GOARCH  ?= $(shell $(GO) env GOARCH)
DIST    ?= dist
BUILD   ?= $(DIST)/build
# The package formats built; `make packages PACKAGERS=deb` builds the .deb only.
PACKAGERS ?= deb rpm

LDFLAGS := -X github.com/rootgate/rootgate/internal/version.override=$(VERSION)

.PHONY: packages clean

packages:
	$(if $(VERSION),,$(error no version: packaging/version.sh failed; set VERSION=))
	rm -rf $(BUILD)
	mkdir -p $(BUILD)/doc
	$(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $(BUILD)/ ./cmd/rootgate ./cmd/rootgated
	$(BUILD)/rootgate man > $(BUILD)/rootgate.1
	$(BUILD)/rootgated --man > $(BUILD)/rootgated.8
	gzip -9n $(BUILD)/rootgate.1 $(BUILD)/rootgated.8
	for sh in bash zsh fish; do \
		$(BUILD)/rootgate completion $$sh > $(BUILD)/rootgate.$$sh && \
		$(BUILD)/rootgated --completion $$sh > $(BUILD)/rootgated.$$sh || exit 1; \
	done
	cp systemd/rootgate.service systemd/rootgate.socket systemd/rootgate-approve.socket \
		systemd/rootgate.sysusers systemd/rootgate.tmpfiles \
		packaging/policy packaging/scripts/*.sh $(BUILD)/
	cp README.md docs/*.md $(BUILD)/doc/
	cd $(BUILD) && for p in $(PACKAGERS); do \
		VERSION='$(VERSION)' GOARCH='$(GOARCH)' $(NFPM) package \
			--config '$(abspath packaging/nfpm.yaml)' --packager $$p --target '$(abspath $(DIST))/' || exit 1; \
	done

clean:
	rm -rf $(DIST)
