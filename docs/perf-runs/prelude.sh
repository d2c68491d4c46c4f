# Sourced by the run scripts (docs/perf-runs/runNNN/run.sh) from the repository root:
# `source docs/perf-runs/prelude.sh runNNN` sets OUT=out/runNNN (the device's own $OUT kept in
# dev_out), PARTS from the environment or the script's default (PARTS_DEFAULT), and defines
# `has PART` (whether PARTS names it) and `pack` (the run's folder as one tarball in the
# device's $OUT: a device call returns at most a few files).
run_name="$1"
dev_out="${OUT:-}"
export OUT="out/$run_name"
mkdir -p "$OUT"
PARTS="${PARTS:-${PARTS_DEFAULT:-}}"
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/$run_name.tgz" -C "$OUT" .; fi; }
