#!/usr/bin/env bash
# What `make test-slurm` needs beyond `make setup` and `make workflow-deps` (issue 32):
# Debian's Slurm 22.05 (slurmctld, slurmd, slurm-client), munge, a static busybox for the
# minimal task root, and Snakemake's slurm executor plugin (PyPI, pinned) in the venv that
# scripts/workflow-deps.sh made. Nothing is configured in /etc: tests/integration/slurm_cluster.py
# keeps the cluster's files under its own directory. Idempotent.
set -euo pipefail
PKGS=(slurmctld slurmd slurm-client munge busybox-static)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "slurm-deps: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  # No daemon is started by the packages' scripts where there is no init system; where
  # there is one, the cluster's own daemons use their own ports and files anyway.
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
VENV=${FLOWFS_DEPS_DIR:-$HOME/.cache/flowfs-deps}/snakemake-venv
cd "$(dirname "$0")/.."
if [ -x "$VENV/bin/pip" ] && ! "$VENV/bin/python" -c "import snakemake_executor_plugin_slurm" 2>/dev/null; then
  echo "slurm-deps: pip install snakemake-executor-plugin-slurm==2.8.0"
  "$VENV/bin/pip" install -q -c workflows/snakemake-constraints.txt \
    "snakemake-executor-plugin-slurm==2.8.0" "snakemake-executor-plugin-slurm-jobstep==0.6.1"
fi
echo "slurm-deps: $(slurmd -V), $(munged -V 2>&1 | head -1), busybox $(busybox 2>&1 | head -1 | awk '{print $2}')"
