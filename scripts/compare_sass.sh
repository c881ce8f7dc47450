#!/usr/bin/env bash
# Compiles every kernel the default DeepSeek-V3.2 specs render for sm_90a (NVRTC, no GPU),
# disassembles each (cuobjdump --dump-sass), strips symbol names, and diffs against a saved set.
#   scripts/compare_sass.sh record DIR [KEY_SUBSTRING]   # render + compile + disassemble into DIR
#   scripts/compare_sass.sh diff BEFORE AFTER             # name every kernel whose SASS differs
# SASS_MLA_PRECISE=1 with record: the sparse MLA kernels with precise = true, same keys.
# SASS_LINEINFO=1 with record: also each kernel's source (.cu) and an nvdisasm listing with inlined
# source lines (.li), for scripts/sass_phases.py (-lineinfo leaves the SASS as it is).
# Needs a build in ./build (libnsajit.a) and cuobjdump that reads sm_90a (CUDA >= 12; e.g. PyPI's
# nvidia-cuda-cuobjdump; set CUOBJDUMP=...).
set -euo pipefail
cd "$(dirname "$0")/.."
CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13/bin/cuobjdump"))')}
export PATH="$(dirname "$CUOBJDUMP"):$PATH"  # cuobjdump runs nvdisasm (PyPI: nvidia-cuda-nvdisasm)
case "${1:-}" in
  record)
    out=$2
    mkdir -p "$out"
    exe=build/sass_specs
    g++ -std=c++20 -O1 -DFMT_HEADER_ONLY -I. -Iinclude -I/usr/local/cuda/include scripts/sass_specs.cpp \
        build/libnsajit.a -L/usr/local/cuda/lib64 -lnvrtc -lcrypto -ldl -lpthread -o "$exe"
    status=0
    LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$exe" "$out" "${3:-}" "${JOBS:-2}" || status=$?
    for c in "$out"/*.cubin; do
      # Symbol names aside: the kernel entry and its parameter symbol may be renamed.
      "$CUOBJDUMP" --dump-sass "$c" | grep -v '^\s*$' | grep -v 'Function :' | grep -v 'code for sm_' |
        sed -E 's/nsajit_[A-Za-z0-9_]+/SYM/g; s@/\*[0-9a-f]{4,}\*/@@' > "${c%.cubin}.sass"
      if [[ "${SASS_LINEINFO:-}" == 1 ]]; then nvdisasm -gi -c "$c" > "${c%.cubin}.li"; fi
    done
    echo "$(ls "$out"/*.sass | wc -l) kernels disassembled"
    exit $status ;;
  disasm)
    for c in "$2"/*.cubin; do
      "$CUOBJDUMP" --dump-sass "$c" | grep -v '^\s*$' | grep -v 'Function :' | grep -v 'code for sm_' |
        sed -E 's/nsajit_[A-Za-z0-9_]+/SYM/g; s@/\*[0-9a-f]{4,}\*/@@' > "${c%.cubin}.sass"
    done ;;
  diff)
    before=$2 after=$3 changed=0
    for b in "$before"/*.sass; do
      k=$(basename "$b")
      if [[ ! -f "$after/$k" ]]; then echo "MISSING in after: ${k%.sass}"; changed=1; continue; fi
      if ! cmp -s "$b" "$after/$k"; then
        echo "CHANGED: ${k%.sass} ($(diff "$b" "$after/$k" | grep -c '^[<>]') lines)"; changed=1
      fi
    done
    for a in "$after"/*.sass; do [[ -f "$before/$(basename "$a")" ]] || { echo "NEW in after: $(basename "${a%.sass}")"; changed=1; }; done
    [[ $changed == 0 ]] && echo "SASS identical: $(ls "$before"/*.sass | wc -l) kernels"
    exit $changed ;;
  *) sed -n 2,8p "$0"; exit 2 ;;
esac
