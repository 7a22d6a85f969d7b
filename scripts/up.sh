#!/usr/bin/env bash
# The main job: set up, build, show the partition engine in a few lines, then run `tessera up`:
# a control plane and a node agent on this host (a simulated node where there is no GPU), SQLite
# under .tessera/, an example config with queues for notebooks, inference and training. It prints
# the URL and tokens and stays up until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
T=./build/src/cli/tessera
echo "\$ tessera partition plan --gpu H100-80GB --want 3g.40gb,2g.20gb,1g.10gb,1g.10gb"
"$T" partition plan --gpu H100-80GB --want 3g.40gb,2g.20gb,1g.10gb,1g.10gb
echo
exec "$T" up --data "${TESSERA_DATA:-.tessera}" --listen "${TESSERA_LISTEN:-127.0.0.1:8080}" "$@"
