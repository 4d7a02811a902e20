# Sourced by pretrain.sh and finetune.sh: what their extra arguments (passed on to the command) change in what the
# script does after the command.

# The value the arguments give a flag (`--flag VALUE` or `--flag=VALUE`; the last one wins, as the package's parsers
# read them, which take no abbreviations), else the default: `flag_value --output_dir outputs/x "$@"`.
flag_value() {
  local flag=$1 value=$2 previous="" arg
  shift 2
  for arg in "$@"; do
    if [ "$previous" = "$flag" ]; then
      value=$arg
    fi
    case "$arg" in "$flag="*) value=${arg#*=} ;; esac
    previous=$arg
  done
  printf '%s\n' "$value"
}

# Whether the arguments ask for help (-h, --help): the command prints it and trains nothing, so nothing follows it.
asks_for_help() {
  local arg
  for arg in "$@"; do
    case "$arg" in -h | --help) return 0 ;; esac
  done
  return 1
}
