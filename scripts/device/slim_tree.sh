#!/usr/bin/env bash
# Here (not on the device): fewer staging calls. Every device call carries the working tree, so
# the committed raw results (~40 MiB of eval.json.gz and the like) leave only ~12 MiB a call for
# the platform's chunks (29 calls). Set the large ones aside for the device calls, stage with
# the room that frees, and put them back afterwards:
#   bash scripts/device/slim_tree.sh aside      # results over 150 kB moved to $ASIDE, git told
#                                               # to ignore their absence (skip-worktree: nothing
#                                               # is staged or committed as deleted)
#   bash scripts/device/stage_platform.sh       # now ~9 calls
#   ... the device calls ...
#   bash scripts/device/slim_tree.sh back       # every file back, git watching it again
# KEEP: files a device target reads (docs/results/locomo/hits-fused.json); a target that reads
# another committed result (locomo-day, locomo-line) needs the tree whole.
set -euo pipefail
cd "$(dirname "$0")/../.."
aside=${ASIDE:-$HOME/.cache/inferscale-tree-aside}
list="$aside/files.txt"
keep=${KEEP:-docs/results/locomo/hits-fused.json}
case ${1:-} in
  aside)
    [ -f "$list" ] && { echo "already set aside ($list): run back first" >&2; exit 1; }
    mkdir -p "$aside"
    git ls-files -z docs/results | xargs -0 du -b | awk -v keep=" $keep " \
      '$1 > 150000 && index(keep, " " $2 " ") == 0 {print $2}' > "$list"
    while read -r f; do
      mkdir -p "$aside/$(dirname "$f")"
      git update-index --skip-worktree "$f"
      mv "$f" "$aside/$f"
    done < "$list"
    echo "$(wc -l < "$list") files set aside in $aside" ;;
  back)
    [ -f "$list" ] || { echo "nothing set aside" >&2; exit 1; }
    while read -r f; do
      mv "$aside/$f" "$f"
      git update-index --no-skip-worktree "$f"
    done < "$list"
    rm "$list"
    git diff --quiet -- docs/results || { echo "a restored file differs from HEAD" >&2; exit 1; }
    echo "every file back" ;;
  *) sed -n 2,13p "$0"; exit 2 ;;
esac
