#!/usr/bin/env bash
# Installs every build and test dependency of Tessera from Debian packages.
# Idempotent: packages already present are not fetched again.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config python3
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev libcpp-httplib-dev
  libsqlite3-dev libpqxx-dev postgresql libboost-dev libspdlog-dev libssl-dev
  libgoogle-perftools-dev         # tcmalloc, the tessera executable's allocator (CMakeLists.txt)
  clang-format clang-tidy
  clang                          # tools/checks/sizes.sh counts the control plane's classes from its AST
  prometheus                     # promtool check metrics (tests/api/metrics_test.cc)
  slurm-wlm munge
  slurmdbd mariadb-server         # sacct in the Slurm accounting test (its own slurmdbd and MariaDB)
  chromium
  python3-kubernetes python3-yaml  # the Kubernetes stand-in's independent checks (tests/backends/kube)
  file dpkg-dev systemd          # cpack -G DEB (dpkg-shlibdeps, file); systemd-analyze verify
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# kubectl (Debian's kubernetes-client) and node/npm (Debian's nodejs, npm), unless some kubectl or
# npm is already installed (another package may provide the same command).
command -v kubectl >/dev/null || missing+=(kubernetes-client)
command -v npm >/dev/null || missing+=(nodejs npm)

# The schema check of rendered Kubernetes manifests: kubernetes-models from npm, as locked.
npm_validate() {
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tools/k8s-validate"
  if [ ! -d "$dir/node_modules/kubernetes-models" ]; then
    echo "setup: npm ci in tools/k8s-validate (kubernetes-models)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}
# The identity tests' OpenID Connect provider (tests/auth/provider): oidc-provider from npm, as
# locked.
npm_oidc_provider() {
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/auth/provider"
  if [ ! -d "$dir/node_modules/oidc-provider" ]; then
    echo "setup: npm ci in tests/auth/provider (oidc-provider)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

# The dashboard's browser tests (tests/api/dashboard_tasks*_test.cc, bench/dashboard_bench.js,
# docs/screenshots/make.js): puppeteer-core, which drives Debian's Chromium (it downloads no
# browser), and axe-core for the accessibility check, from npm, as locked.
npm_dashboard_axe() {
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/api/dashboard_axe"
  if [ ! -d "$dir/node_modules/axe-core" ] || [ ! -d "$dir/node_modules/puppeteer-core" ]; then
    echo "setup: npm ci in tests/api/dashboard_axe (axe-core, puppeteer-core)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  npm_validate
  npm_oidc_provider
  npm_dashboard_axe
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

# Only promtool is wanted from the prometheus package: on a host running systemd, the Prometheus
# server it just installed and started (port 9090) is stopped and disabled again. A prometheus
# that was installed before is left alone.
if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  echo "setup: disabling the prometheus service (only promtool is used)"
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi

# MariaDB is only the Slurm accounting test's own (started under its test directory): the system
# service the package just started is stopped and disabled again.
if [[ " ${missing[*]} " == *" mariadb-server "* ]] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  echo "setup: disabling the mariadb service (the Slurm accounting test starts its own)"
  $SUDO systemctl disable --now mariadb >/dev/null 2>&1 || true
fi

npm_validate
npm_oidc_provider
npm_dashboard_axe
