#!/usr/bin/env bash
# The relocatable install (cmake/ServeLabInstall.cmake): installs the build into a temporary
# prefix, then checks that the installed programs name no build-tree or .venv path in their
# dynamic section, that every library they load resolves inside the prefix or the system's
# folders, and that servelab-cli, run from another folder with a bare environment, finds the
# built-in model and GPT-2's tokenizer inside the prefix, also after the prefix is moved.
# libtorch is installed as symbolic links (SERVELAB_INSTALL_TORCH_LINKS=1): copies are 0.5 GB (CPU)
# to several GB (CUDA); the links sit where the copies would, so the loader's search is the same.
#   tests/install/test_install.sh BUILD_DIR MODEL_GGUF TOKENIZER_DIR
# (the build's SERVELAB_BUILTIN_MODEL and SERVELAB_GPT2_TOKENIZER_DIR). Exits 77, which CTest
# reports as skipped, when those are not there (the GPU machine carries the model in parts).
set -euo pipefail
build=$(cd "$1" && pwd)
for f in "$2" "$3/vocab.json" "$3/merges.txt"; do
  [ -e "$f" ] || { echo "test_install: skipped: $f is not there (scripts/bootstrap puts it there)"; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "test_install: FAIL: $*" >&2
  exit 1
}

SERVELAB_INSTALL_TORCH_LINKS=1 cmake --install "$build" --prefix "$work/a/usr" >"$work/install.log" ||
  { cat "$work/install.log"; fail "cmake --install failed"; }
prefix="$work/a/usr"
programs=("$prefix/bin/servelab-cli")
[ -x "$prefix/bin/servelab" ] && programs+=("$prefix/bin/servelab")
for f in share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf share/servelab/gpt2/vocab.json \
  share/servelab/gpt2/merges.txt lib/servelab/libtorch_cpu.so lib/servelab/libc10.so \
  share/servelab/adapters/conllpp/adapter_model.safetensors share/servelab/adapters/cnn/adapter_config.json \
  share/servelab/adapters/hellaswag_processed/adapter_model.safetensors; do
  [ -e "$prefix/$f" ] || fail "$f is not in the install"
done
[ -L "$prefix/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf" ] && fail "the model is installed as a link"

# RUNPATH: only $ORIGIN-relative; no RPATH.
for p in "${programs[@]}"; do
  dyn=$(readelf -d "$p")
  runpath=$(sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p' <<<"$dyn")
  [ "$runpath" = '$ORIGIN/../lib/servelab' ] || fail "$(basename "$p") has RUNPATH '$runpath'"
  grep -q '(RPATH)' <<<"$dyn" && fail "$(basename "$p") has an RPATH"
  # Every library the loader finds is in the prefix or a system folder; none is missing.
  ldd "$p" >"$work/ldd.txt" || fail "ldd $(basename "$p") failed"
  grep -q 'not found' "$work/ldd.txt" && fail "$(basename "$p"): $(grep 'not found' "$work/ldd.txt")"
  : >"$work/resolved.txt"
  while read -r name arrow path rest; do
    [ "$arrow" = "=>" ] || continue
    path=$(realpath -s -m "$path") # bin/../lib/servelab/x -> lib/servelab/x, links kept
    echo "$path" >>"$work/resolved.txt"
    case "$path" in
    "$prefix"/lib/servelab/*) ;;
    /lib/* | /usr/lib/* | /lib64/*) ;;
    *) fail "$(basename "$p") loads $name from $path" ;;
    esac
  done <"$work/ldd.txt"
  grep -qx "$prefix/lib/servelab/libtorch_cpu.so" "$work/resolved.txt" ||
    fail "$(basename "$p") does not load libtorch_cpu from the prefix"
done

# Run from elsewhere, with nothing of the build's environment, and data only from the prefix.
mkdir -p "$work/elsewhere" "$work/home"
run() {
  (cd "$work/elsewhere" && env -i PATH=/usr/bin:/bin HOME="$work/home" XDG_DATA_DIRS="${xdg_dirs:-$work/none}" "$@")
}
# servelab-cli info's "path" (the model file it loaded) must be $1, and its built-in adapters must
# come from adapters/ beside it.
model_is() {
  python3 - "$work/info.json" "$1" <<'PY'
import json, os, sys
info = json.load(open(sys.argv[1]))
if info.get("path") != sys.argv[2]:
    sys.exit(f"test_install: FAIL: the model came from {info.get('path')}, not {sys.argv[2]}")
want = os.path.join(os.path.dirname(os.path.dirname(sys.argv[2])), "adapters")
got = info.get("builtin_adapters", {})
if got.get("dir") != want or len(got.get("ids", [])) != 3:
    sys.exit(f"test_install: FAIL: the built-in adapters came from {got}, not {want}")
PY
}
check_install() {
  local prefix=$1
  run "$prefix/bin/servelab-cli" info >"$work/info.json" || fail "servelab-cli info failed in $prefix"
  model_is "$prefix/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  text=$(run "$prefix/bin/servelab-cli" generate --prompt "The capital of France is" --max-new-tokens 6) ||
    fail "servelab-cli generate failed in $prefix"
  [ -n "$(tr -d '[:space:]' <<<"$text")" ] || fail "servelab-cli generate printed nothing"
  # GPT-2's tokenizer (the demo model's) from the prefix: "Hello world" is ids 15496 and 995.
  ids=$(run "$prefix/bin/servelab-cli" tokenize --demo "Hello world") || fail "servelab-cli tokenize failed"
  grep -qx "  ids: 15496 995" <<<"$ids" || fail "tokenize --demo printed '$ids'"
}
check_install "$prefix"
echo "installed: $text"

# Moved somewhere else entirely, it still finds its libraries and data (relative to the binary).
mv "$work/a" "$work/b"
check_install "$work/b/usr"

# Without the data beside the binary, XDG_DATA_DIRS finds it (before any build-tree copy).
mv "$work/b/usr/share/servelab" "$work/xdg-servelab"
mkdir -p "$work/xdg" && mv "$work/xdg-servelab" "$work/xdg/servelab"
xdg_dirs="$work/elsewhere:$work/xdg" run "$work/b/usr/bin/servelab-cli" info >"$work/info.json" ||
  fail "servelab-cli info failed with the data in XDG_DATA_DIRS"
model_is "$work/xdg/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf"
echo "test_install: ok (installed, moved, ran from $work/elsewhere, data through XDG_DATA_DIRS)"
