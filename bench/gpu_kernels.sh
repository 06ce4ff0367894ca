#!/usr/bin/env bash
# The kernel libraries of a GPU run, built once and carried to later runs: the device machine
# starts bare at each call, a build takes minutes, unpacking a carried one seconds.
#   bash bench/gpu_kernels.sh build DIR 'FILTER' [TARGETS]
#       meson + ninja into DIR (TARGETS: cpu,sm_90a by default; CUTLASS from an installed
#       nvidia-cutlass or .whl/nvidia_cutlass*.whl), then DIR's libraries, registry and
#       gpu_helper packed as $OUT/kernels-NAME.txz.aa, .ab, ... (NAME: DIR's base name; 15 MiB parts);
#       KERNELS=/abs/manifest.yaml builds from another manifest (a sweep appended to kernels.yaml)
#   bash bench/gpu_kernels.sh unpack DIR PREFIX...
#       the parts of one or more packed builds (PREFIX: path/kernels-NAME.txz) into DIR, their
#       registries merged (each op and target from one build)
# Then run from the source tree: export TILEDISPATCH_KERNELS_DIR=DIR PYTHONPATH=$PWD/python
# (bench/gpu_call.sh does that: sanitizer, the README's sm_90a line, torch tests, train step, zoo)
set -euo pipefail
verb=${1:?usage: gpu_kernels.sh build DIR FILTER [TARGETS] | unpack DIR PREFIX...}
dir=${2:?the kernels directory}
case "$verb" in
  build)
    filter=${3:?a kernel filter (-Dkernel_filter)}
    targets=${4:-cpu,sm_90a}
    cutlass=()
    if ! python3 -c "import cutlass_library" 2>/dev/null && ls .whl/nvidia_cutlass*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --target /tmp/cutlass-site .whl/nvidia_cutlass*.whl
      cutlass=("-Dcutlass_include=/tmp/cutlass-site/cutlass_library/source/include")
    fi
    start=$(date +%s)
    meson setup "$dir" "-Dgpu_targets=$targets" "-Dkernel_filter=$filter" ${KERNELS:+"-Dkernels=$KERNELS"} "${cutlass[@]}" > "$dir.setup.log" 2>&1 \
      || { tail -30 "$dir.setup.log"; exit 1; }
    grep -E "vendor|WARNING" "$dir.setup.log" || true
    ninja -C "$dir" > "$dir.build.log" 2>&1 || { grep -E "error|FAILED" "$dir.build.log" | head -20; exit 1; }
    echo "built $(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['kernels']))" "$dir/registry.json") kernels in $(( $(date +%s) - start )) s"
    if [ -n "${OUT:-}" ]; then
      name=$(basename "$dir")
      (cd "$dir" && tar cf - ./*.so registry.json $(ls gpu_helper 2>/dev/null)) | xz -T0 -6 \
        | split -b 15m - "$OUT/kernels-$name.txz."
      ls -l "$OUT"/kernels-"$name".txz.*
    fi
    ;;
  unpack)
    shift 2
    [ $# -gt 0 ] || { echo "unpack: name at least one packed build" >&2; exit 2; }
    mkdir -p "$dir"
    for prefix in "$@"; do
      part=$(mktemp -d)
      cat "$prefix".* | xz -d | tar xf - -C "$part"
      python3 - "$dir" "$part" <<'PY'
import json, pathlib, shutil, sys
dest, part = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
new = json.loads((part / "registry.json").read_text())
index = dest / "registry.json"
if index.exists():
    have = json.loads(index.read_text())
    taken = {(lib["op"], lib["target"]) for lib in have["libraries"]}
    clash = taken & {(lib["op"], lib["target"]) for lib in new["libraries"]}
    if clash:
        sys.exit(f"unpack: {sorted(clash)} come from two builds; carry each op and target once")
    have["kernels"] += new["kernels"]
    have["libraries"] += new["libraries"]
    new = have
for f in part.iterdir():
    if f.name != "registry.json":
        shutil.copy2(f, dest / f.name)
index.write_text(json.dumps(new))
print(f"{dest}: {len(new['kernels'])} kernels in {', '.join(l['file'] for l in new['libraries'])}")
PY
      rm -rf "$part"
    done
    ;;
  *) echo "unknown verb $verb (build, unpack)" >&2; exit 2 ;;
esac
