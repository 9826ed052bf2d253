#!/usr/bin/env bash
# Installs what envd needs on a fresh Debian machine, as root; with --tests also what only
# its tests need (the SDKs' and console's npm tools, Chromium, Kubernetes built from source
# and the node image's Debian layer), so the demo's first run does not wait for those.
# Idempotent: a second run only checks. Go programs are pinned; Debian packages come
# from the machine's own apt sources.
set -euo pipefail

TESTS=0
case "${1:-}" in
  --tests) TESTS=1 ;;
  "") ;;
  *) echo "usage: setup.sh [--tests]" >&2; exit 2 ;;
esac

CONTAINERD_VERSION=v2.4.2
VERSITYGW_VERSION=v1.8.0
# BuildKit runs Dockerfile builds (builder/buildkit); docs/notes/builds-migrations.md says why
# as binaries and not as a library.
BUILDKIT_VERSION=v0.34.2
GOBIN_DIR=${GOBIN_DIR:-/usr/local/lib/envd/bin}
# gVisor's Go module has no tags, only pseudo-versions of its "go" branch.
GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237
GVISOR_DIR=${GVISOR_DIR:-/usr/local/lib/envd/gvisor}

# What must already be there; each says what is wrong instead of failing later.
fail() { echo "setup: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run as root (apt-get, containerd, overlayfs and network namespaces need it)"
[ -r /etc/debian_version ] && [ "$(cut -d. -f1 /etc/debian_version)" = 12 ] ||
  fail "needs Debian 12 (bookworm); this is $(cat /etc/debian_version 2>/dev/null || uname -sr)"
command -v go >/dev/null || fail "go is not on PATH; install the Go version of go.mod ($(awk '/^go /{print $2}' "$(dirname "$0")/../go.mod"))"
want_go=$(awk '/^go /{print $2}' "$(dirname "$0")/../go.mod")
have_go=$(go env GOVERSION | sed 's/^go//')
[ "$(printf '%s\n%s\n' "$want_go" "$have_go" | sort -V | head -n1)" = "$want_go" ] ||
  fail "go.mod needs Go $want_go or newer; go on PATH is $have_go"
if [ "$TESTS" = 1 ]; then
  command -v node >/dev/null && command -v npm >/dev/null ||
    fail "node and npm are not on PATH; install Node.js 20 or newer (the SDKs' and the console's tests need them)"
  have_node=$(node --version | sed 's/^v//')
  [ "$(printf '%s\n%s\n' 20 "$have_node" | sort -V | head -n1)" = 20 ] ||
    fail "the TypeScript SDK needs Node.js 20 or newer; node on PATH is $have_node"
fi

need_apt=()
for pkg in runc busybox-static debootstrap containernetworking-plugins iptables \
           postgresql e2fsprogs fuse3 zstd iproute2 tar jq curl openssh-client; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

mkdir -p "$GOBIN_DIR"
if ! "$GOBIN_DIR/containerd" --version 2>/dev/null | grep -qF " ${CONTAINERD_VERSION#v}" || [ ! -x "$GOBIN_DIR/ctr" ]; then
  echo "setup: go install containerd $CONTAINERD_VERSION"
  GOBIN="$GOBIN_DIR" GOFLAGS=-tags=no_btrfs go install \
    "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION"
fi
if [ ! -x "$GOBIN_DIR/versitygw" ]; then
  echo "setup: go install versitygw $VERSITYGW_VERSION"
  GOBIN="$GOBIN_DIR" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
fi
if ! "$GOBIN_DIR/buildkitd" --version 2>/dev/null | grep -qF " $BUILDKIT_VERSION" || [ ! -x "$GOBIN_DIR/buildctl" ]; then
  # Not "go install ...@version": BuildKit's go.mod has exclude directives, which go install
  # refuses. Built from the module as downloaded, with its own go.mod's versions.
  echo "setup: go build buildkitd and buildctl $BUILDKIT_VERSION"
  bk_mod=$(go mod download -json "github.com/moby/buildkit@$BUILDKIT_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$bk_mod" ] || fail "go mod download github.com/moby/buildkit@$BUILDKIT_VERSION gave no directory"
  bk_src=$(mktemp -d)
  cp -r "$bk_mod/." "$bk_src" && chmod -R u+w "$bk_src"
  (cd "$bk_src" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/moby/buildkit/version.Version=$BUILDKIT_VERSION" \
    -o "$GOBIN_DIR/" ./cmd/buildkitd ./cmd/buildctl)
  rm -rf "$bk_src"
fi
modprobe overlay 2>/dev/null || true
modprobe fuse 2>/dev/null || true
if [ "$TESTS" = 1 ]; then
# gVisor (runsc, containerd-shim-runsc-v1) for the gvisor runtime class (runtime/class.go),
# runtime/sandbox and docs/gvisor.md; a demo node (envd up) needs it only with
# --runtime-class gvisor, and then does not start without it. Optional:
# a failed build is reported and setup goes on. Static (CGO_ENABLED=0): runsc re-executes
# itself inside its chroot, where a dynamic binary's loader does not exist. The -X stamps
# the version runsc --version prints and writes into checkpoint images. Kept out of
# GOBIN_DIR so the daemon's PATH does not pick it up. About 15 minutes on 2 busy cores.
if [ "$(cat "$GVISOR_DIR/VERSION" 2>/dev/null)" != "$GVISOR_VERSION" ] ||
   [ ! -x "$GVISOR_DIR/runsc" ] || [ ! -x "$GVISOR_DIR/containerd-shim-runsc-v1" ]; then
  echo "setup: go install gVisor $GVISOR_VERSION"
  gvisor_tmp=$(mktemp -d)
  if GOBIN="$gvisor_tmp" CGO_ENABLED=0 nice -n 19 go install \
       -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$GVISOR_VERSION" \
       "gvisor.dev/gvisor/runsc@$GVISOR_VERSION" "gvisor.dev/gvisor/shim@$GVISOR_VERSION" &&
     mkdir -p "$GVISOR_DIR" &&
     install -m 0755 "$gvisor_tmp/runsc" "$GVISOR_DIR/runsc" &&
     install -m 0755 "$gvisor_tmp/shim" "$GVISOR_DIR/containerd-shim-runsc-v1" &&
     echo "$GVISOR_VERSION" > "$GVISOR_DIR/VERSION"; then
    echo "setup: gVisor in $GVISOR_DIR"
  else
    echo "setup: warning: gVisor $GVISOR_VERSION did not build or install; runtime/sandbox tests will fail" >&2
  fi
  rm -rf "$gvisor_tmp"
fi
# The TypeScript SDK's build and test tools (sdk/typescript, e2e TestSDKTypeScript): npm ci
# from its committed package-lock.json, skipped while node_modules matches that lock file.
SDK_TS_DIR=$(cd "$(dirname "$0")/../sdk/typescript" && pwd)
sdk_ts_lock=$(sha256sum "$SDK_TS_DIR/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$SDK_TS_DIR/node_modules/.envd-lock.sha256" 2>/dev/null)" != "$sdk_ts_lock" ]; then
  echo "setup: npm ci in sdk/typescript"
  (cd "$SDK_TS_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$sdk_ts_lock" > "$SDK_TS_DIR/node_modules/.envd-lock.sha256"
fi
# The e2e test of the MCP server (e2e/mcp, e2e TestRootMCPTypeScript): the official MCP TypeScript
# SDK by npm ci from e2e/mcp's lock file.
MCP_TS_DIR=$(cd "$(dirname "$0")/../e2e/mcp" && pwd)
mcp_ts_lock=$(sha256sum "$MCP_TS_DIR/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$MCP_TS_DIR/node_modules/.envd-lock.sha256" 2>/dev/null)" != "$mcp_ts_lock" ]; then
  echo "setup: npm ci in e2e/mcp"
  (cd "$MCP_TS_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$mcp_ts_lock" > "$MCP_TS_DIR/node_modules/.envd-lock.sha256"
fi
# The e2e test of the E2B-compatible API (e2e/e2b, e2e TestRootE2BTypeScript): the official e2b
# JavaScript SDK by npm ci from e2e/e2b's lock file.
E2B_TS_DIR=$(cd "$(dirname "$0")/../e2e/e2b" && pwd)
e2b_ts_lock=$(sha256sum "$E2B_TS_DIR/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$E2B_TS_DIR/node_modules/.envd-lock.sha256" 2>/dev/null)" != "$e2b_ts_lock" ]; then
  echo "setup: npm ci in e2e/e2b"
  (cd "$E2B_TS_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$e2b_ts_lock" > "$E2B_TS_DIR/node_modules/.envd-lock.sha256"
fi
# The web console (web/, e2e TestRootConsole*): esbuild and xterm.js by npm ci from web/'s lock
# file, and Debian's chromium (with its fonts) for the browser test.
WEB_DIR=$(cd "$(dirname "$0")/../web" && pwd)
web_lock=$(sha256sum "$WEB_DIR/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$WEB_DIR/node_modules/.envd-lock.sha256" 2>/dev/null)" != "$web_lock" ]; then
  echo "setup: npm ci in web"
  (cd "$WEB_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$web_lock" > "$WEB_DIR/node_modules/.envd-lock.sha256"
fi
if ! command -v chromium >/dev/null; then
  echo "setup: apt-get install chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# The deployment test (deploy/kubernetes/test): Kubernetes built from source and the node
# image's Debian layer, both cached after the first run.
bash "$(dirname "$0")/k8s-build.sh"
bash "$(dirname "$0")/build-node-image.sh" --base-only
fi
echo "setup: ok ($GOBIN_DIR$([ "$TESTS" = 1 ] && echo ", with the tests' tools"))"
