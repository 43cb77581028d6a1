#!/usr/bin/env bash
# Create or update the course's virtual environment from a lock file: `make lab` and `make test` call this.
#   tools/install.sh VENV LOCK      e.g. tools/install.sh .venv requirements/lab.txt
# Every failure prints one line starting with "softmax-lab install:" that names the fix. Nothing outside
# VENV is written, and VENV is only ever created here (an existing broken one is reported, not deleted).
set -uo pipefail
VENV=${1:?usage: tools/install.sh VENV LOCK}
LOCK=${2:?usage: tools/install.sh VENV LOCK}
PYTHON=${PYTHON:-python3}
NEED_GB=${SOFTMAX_LAB_NEED_GB:-8}   # torch's CUDA wheels unpack to about 5 GB; pip needs room for the downloads

die() { printf '\nsoftmax-lab install: %s\n' "$*" >&2; exit 1; }

# --- the platform and the Python ---------------------------------------------------------------------
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) die "this machine is $(uname -s) $(uname -m); the course installs natively on Linux x86-64 only (Triton has no wheels for it). See README.md, 'Other platforms': WSL2 on Windows, a hosted notebook or a Linux machine on macOS." ;;
esac
command -v "$PYTHON" >/dev/null 2>&1 || die "no '$PYTHON' on PATH: install Python 3.11 or newer (Debian/Ubuntu: sudo apt install python3 python3-venv), or name one: make lab PYTHON=/usr/bin/python3.12"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null \
  || die "$PYTHON is $("$PYTHON" -V 2>&1); the course needs Python 3.11 or newer: make lab PYTHON=python3.12 (or install one)"

# --- the virtual environment -------------------------------------------------------------------------
if [ -e "$VENV" ] && ! "$VENV/bin/python" -c 'import sys, pip' >/dev/null 2>&1; then
  die "$VENV exists but is broken (no working $VENV/bin/python with pip): remove it with 'make clean' and run the command again (make clean deletes only $VENV and test output; your notebooks in workspace/ are kept)"
fi
if [ ! -e "$VENV" ]; then
  if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>"$VENV.err"; then
    rm -rf "$VENV"   # made by this line just now: nothing of the learner's is in it
    msg=$(tail -n 1 "$VENV.err"); rm -f "$VENV.err"
    die "$PYTHON cannot create a virtual environment ($msg): install its venv module (Debian/Ubuntu: sudo apt install python3-venv)"
  fi
  rm -f "$VENV.err"
fi

# --- room on disk ------------------------------------------------------------------------------------
free_kb=$(df -Pk "$VENV" | awk 'NR==2 {print $4}')
have_gb=$(( ${free_kb:-0} / 1048576 ))
if ! ls -d "$VENV"/lib/python3*/site-packages/torch >/dev/null 2>&1 && [ "$have_gb" -lt "$NEED_GB" ]; then
  die "only ${have_gb} GB free where $VENV lives; the first install needs about ${NEED_GB} GB (PyTorch with its CUDA libraries): free some space and run the command again"
fi

# --- the locked packages, with a progress line that keeps moving ---------------------------------------
# pip downloads into its own temporary folder (here: $VENV/.pip-tmp), so the megabytes there show a long download
# going on; the package counter alone would sit still for minutes on PyTorch's large wheels.
log="$VENV/install.log"
tmp="$VENV/.pip-tmp"
rm -rf "$tmp" && mkdir -p "$tmp"
echo "softmax-lab: installing $(grep -c '==' "$LOCK") pinned packages from $LOCK into $VENV"
echo "             (the first time downloads about 3 GB: PyTorch with its CUDA libraries; later runs take seconds)"
TMPDIR="$tmp" "$VENV/bin/python" -m pip install --disable-pip-version-check --require-hashes -r "$LOCK" >"$log" 2>&1 &
pip_pid=$!
start=$SECONDS
last=0
total=$(grep -c '==' "$LOCK")
while kill -0 "$pip_pid" 2>/dev/null; do
  sleep 1
  got=$(grep -c '^Collecting' "$log")
  if grep -q '^Installing collected packages' "$log"; then
    what="unpacking into $VENV: $(du -sm --exclude=.pip-tmp "$VENV" 2>/dev/null | cut -f1) MB"
  else
    file=$(grep -E '^ *Downloading ' "$log" | tail -n 1 | sed -E 's/^ *Downloading //; s/^.*\///')
    what="${file:+$(du -sm "$tmp" 2>/dev/null | cut -f1) MB downloaded, now $file}"
  fi
  line=$(printf '  [%3d/%d packages] %-72.72s %4d s' "$got" "$total" "${what:-resolving the lock file}" $((SECONDS - start)))
  if [ -t 1 ]; then printf '\r%s' "$line"; elif [ $((SECONDS - last)) -ge 10 ]; then echo "$line"; last=$SECONDS; fi
done
wait "$pip_pid"; rc=$?
[ -t 1 ] && printf '\n'
rm -rf "$tmp"
if [ "$rc" -ne 0 ]; then
  if grep -qiE 'No space left on device' "$log"; then
    die "the disk filled up during the install: free some space and run the command again (log: $log)"
  elif grep -qiE 'NewConnectionError|Failed to establish|Temporary failure in name resolution|Network is unreachable|ConnectTimeout|ProxyError|No matching distribution' "$log"; then
    die "pip could not reach PyPI (no network, a proxy, or a local pip configuration that hides PyPI): connect and run the command again (log: $log)"
  elif grep -qiE 'THESE PACKAGES DO NOT MATCH THE HASHES' "$log"; then
    die "a download did not match the hash in $LOCK (a proxy or mirror serving other files): retry, or report it (log: $log)"
  fi
  tail -n 15 "$log" >&2
  die "pip failed (exit $rc); the last lines are above, the whole log is $log"
fi
echo "  done in $((SECONDS - start)) s"

# --- this package (editable) and the course's Jupyter kernel and settings: one line per step ------------
echo "  installing the softmax-lab package (editable: your checkout's code/) ..."
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e . >>"$log" 2>&1 \
  || { tail -n 15 "$log" >&2; die "installing the softmax-lab package failed (log: $log)"; }
echo "  registering the Jupyter kernel 'softmax-lab' ..."
"$VENV/bin/python" -m ipykernel install --sys-prefix --name softmax-lab --display-name "Softmax Lab (Python 3)" >>"$log" 2>&1 \
  || die "registering the Jupyter kernel failed (log: $log)"
# No news pop-up on every page (JupyterLab asks whether to fetch news; this switches the plugin off).
echo "  switching off JupyterLab's news pop-up ..."
"$VENV/bin/jupyter" labextension disable --level=sys_prefix "@jupyterlab/apputils-extension:announcements" >>"$log" 2>&1 || true
echo "  installed in $((SECONDS - start)) s"
