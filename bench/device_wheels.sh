#!/usr/bin/env bash
# Downloads into .whl/ the wheels that bench/device_check.sh installs on a lent GPU machine.
#
# That machine has Python 3.12 with torch, numpy, scipy and tqdm but nothing else this project
# imports, and it cannot reach a package registry: what the twin and the trainer import beyond
# those travels with the working tree as wheels. Pinned to the versions the project is tested with
# here. Run once, on this side, before asking for a device:
#
#     bash bench/device_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl && mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl \
    array-api-compat==1.16.0 gymnasium==1.4.0 farama-notifications==0.0.6 \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    typing-extensions==4.16.0
ls .whl
du -sh .whl
