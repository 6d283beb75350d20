#!/usr/bin/env bash
# The "Next, try" of scripts/demo.sh: RUN REPO ORCH [the user's apply options...]. The user's own
# -e/--results/-i/--limit are kept, shell-quoted, so the suggested bisect runs the same cells on
# the same hosts, ports and results folder as the apply did.
set -euo pipefail
run=$1 repo=$2 orch=$3
shift 3

quote() { # one word, as the shell reads it back
  if [[ $1 =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

keep=""
where="" # the options investigate takes too: where results and hosts are
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  a=${args[i]}
  case $a in
    -e | --extra-vars | --results | -i | --inventory | -l | --limit)
      if ((i + 1 < ${#args[@]})); then
        keep+=" $(quote "$a") $(quote "${args[i + 1]}")"
        [[ $a == -e || $a == --extra-vars ]] || where+=" $(quote "$a") $(quote "${args[i + 1]}")"
        i=$((i + 1))
      fi
      ;;
    --extra-vars=* | --results=* | --inventory=* | --limit=* | -e?* | -i?* | -l?*)
      keep+=" $(quote "$a")"
      [[ $a == --extra-vars=* || $a == -e?* ]] || where+=" $(quote "$a")"
      ;;
  esac
done

good_cell=$(ls -d "$run"/cells/good-tuned-eagle3-2-* 2>/dev/null | head -n 1 || true)
bad_cell=$(ls -d "$run"/cells/bad-tuned-eagle3-2-* 2>/dev/null | head -n 1 || true)
# the story's afternoon: a new commit and NCCL as shipped, both at once
moved_cell=$(ls -d "$run"/cells/bad-default-eagle3-2-* 2>/dev/null | head -n 1 || true)
r=$(quote "$run")
title="Next, try:"
if [ -n "${ORCH_SIM_STATE:-}" ]; then
  # demo.sh put the simulated GPUs on PATH: audit's drift check and bisect need them too
  title="Next, try (the first line puts the simulated GPUs on your PATH, as demo.sh did):
  export PATH=$(quote "$(dirname "$ORCH_SIM_STATE")/bin"):\"\$PATH\" ORCH_SIM_STATE=$(quote "$ORCH_SIM_STATE")"
fi
cat <<NEXT

$title
  $orch show $r
  $orch report $r --by commit --format md
  $orch diff $(quote "${good_cell:-$run/cells/<a good cell>}") $(quote "${bad_cell:-$run/cells/<the same cell, bad>}")
  $orch audit $r
  $orch history demo-eagle3-regression --results $(quote "$(dirname "$run")")
  $orch investigate $(quote "${good_cell:-$run/cells/<a good cell>}") $(quote "${moved_cell:-$run/cells/<a bad cell>}")$where
  $orch bisect playbooks/demo.yml -e $(quote "sim_repo=$repo")$keep --cell 'nccl=tuned,spec=eagle3-2' --good good --bad bad
NEXT
