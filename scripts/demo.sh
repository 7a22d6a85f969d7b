#!/usr/bin/env bash
# The main job: set up, build, and demonstrate the partition engine through `tessera`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
T=./build/src/cli/tessera
run() { echo; echo "\$ tessera $*"; "$T" "$@"; }
run catalog list
run partition plan --gpu H100-80GB --want 3g.40gb,2g.20gb,1g.10gb,1g.10gb
run partition plan --gpu A100-40GB --want 4g.20gb,3g.20gb
run partition plan --gpu MI300X --want 24GiB,24GiB,40GiB,40GiB
echo; echo "\$ tessera partition plan --gpu A100-40GB --want 4g.20gb,4g.20gb   (impossible, exits non-zero)"
"$T" partition plan --gpu A100-40GB --want 4g.20gb,4g.20gb || echo "(exit code $?)"
run partition geometries --gpu A30-24GB
