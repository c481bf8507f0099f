#!/bin/bash
# Copies built moeserve files into an install prefix (what deploy/install.sh
# does after building; also used by the install test with Bazel's outputs):
#
#   PREFIX/bin/            moeserve, moeserve_client, moeserve_bench,
#                          moeserve_loadgen, moeserve_soak (those given)
#   PREFIX/lib/moeserve/   the plugins (libmoeserve_spm.so, and
#                          libmoeserve_cuda.so when built)
#   PREFIX/share/moeserve/models/   the bundled models (demo, demo-fg,
#                          demo-draft)
#
# The installed binaries find their plugins through <bin>/../lib/moeserve/
# and the server its default models through <bin>/../share/moeserve/, so the
# prefix can be moved or copied into an image as a whole.
#
# Usage: install_files.sh PREFIX MODELS_DIR FILE...
#   FILE: a binary (-> bin/) or a lib*.so plugin (-> lib/moeserve/).
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 PREFIX MODELS_DIR FILE..." >&2
  exit 2
fi
prefix="$1"
models="$2"
shift 2
mkdir -p "$prefix/bin" "$prefix/lib/moeserve" "$prefix/share/moeserve/models"
for file in "$@"; do
  case "$(basename "$file")" in
    lib*.so) install -m 0644 "$file" "$prefix/lib/moeserve/" ;;
    *) install -m 0755 "$file" "$prefix/bin/" ;;
  esac
done
for model in demo demo-fg demo-draft; do
  [ -d "$models/$model" ] || continue
  rm -rf "$prefix/share/moeserve/models/$model"
  mkdir -p "$prefix/share/moeserve/models/$model"
  # -L: Bazel's runfiles are symlinks; the prefix must hold the files.
  cp -L "$models/$model"/* "$prefix/share/moeserve/models/$model/"
done
echo "installed into $prefix: $(ls "$prefix/bin" | tr '\n' ' ')"
