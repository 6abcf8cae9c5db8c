#!/usr/bin/env bash
# Runs every cargo-fuzz target of herald-core (crates/core/fuzz) for a bounded time each,
# starting from the committed seeds (crates/core/fuzz/seeds/<target>/) and using the target's
# libFuzzer dictionary (crates/core/fuzz/dicts/<target>.dict). Exits non-zero when a target
# finds a crash; the input that crashed is left in crates/core/fuzz/artifacts/<target>/.
#
#   HERALD_FUZZ_SECONDS=20    time per target, in seconds
#   HERALD_FUZZ_RSS_MB=2048   memory limit per fuzzing process, in MiB
#
# Needs a nightly toolchain (rustup) and cargo-fuzz, which it installs from crates.io when
# missing. The corpus grows in crates/core/fuzz/corpus/<target>/ (not committed) and is reused
# by the next run.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fuzz="$repo/crates/core/fuzz"
seconds="${HERALD_FUZZ_SECONDS:-20}"
rss_mb="${HERALD_FUZZ_RSS_MB:-2048}"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "deploy/fuzz.sh: installing the nightly toolchain" >&2
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "deploy/fuzz.sh: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

cd "$repo/crates/core"
targets=$(cargo +nightly fuzz list)
# One build for all targets; `fuzz run` below then finds them up to date.
cargo +nightly fuzz build

failed=()
for target in $targets; do
  mkdir -p "$fuzz/corpus/$target"
  echo "deploy/fuzz.sh: fuzzing $target for ${seconds}s" >&2
  dict=()
  if [ -f "$fuzz/dicts/$target.dict" ]; then dict=(-dict="$fuzz/dicts/$target.dict"); fi
  # New inputs go to the first directory (the corpus); the seeds are read only.
  if ! cargo +nightly fuzz run "$target" "$fuzz/corpus/$target" "$fuzz/seeds/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -timeout=10 -print_final_stats=1 \
    "${dict[@]}"; then
    failed+=("$target")
  fi
done

echo "deploy/fuzz.sh: for a longer run of one target (targets: $(echo $targets)):" >&2
echo "  cd crates/core && cargo +nightly fuzz run cursor fuzz/corpus/cursor fuzz/seeds/cursor -- -max_total_time=3600 -rss_limit_mb=$rss_mb -dict=fuzz/dicts/cursor.dict" >&2
if [ "${#failed[@]}" -gt 0 ]; then
  echo "deploy/fuzz.sh: crashes found by: ${failed[*]} (inputs in $fuzz/artifacts/)" >&2
  echo "  reproduce: cd crates/core && cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>" >&2
  exit 1
fi
echo "deploy/fuzz.sh: no crashes" >&2
