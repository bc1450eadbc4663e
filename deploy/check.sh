#!/usr/bin/env bash
# Offline checks of the deployment files, run by .ci/run; one line per check and a
# cargo-style summary line (`test result: ...`) that .ci/run adds to its totals:
#
# - the Kubernetes manifests against the Kubernetes API schemas (PyPI's
#   kubernetes-validate, strict, with its bundled schemas: no cluster, no network), as
#   kustomize renders them (`kubectl kustomize` when kubectl is there, else each file
#   the kustomization lists), plus the Job of the guide; and a broken copy must fail;
# - the ConfigMaps' workflow and agents equal the examples they copy;
# - the Helm values ask for three JetStream servers on file storage;
# - the systemd unit passes `systemd-analyze verify` without a warning;
# - the two Dockerfiles' runtime parts are the same.
#
#   bash deploy/check.sh          # from anywhere; makes .venv-deploy/ on first use
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

passed=0
failed=0
skipped=0
check() {   # check NAME COMMAND...: runs it, prints its output only on failure
    local name="$1" out
    shift
    if out="$("$@" 2>&1)"; then
        echo "test deploy::$name ... ok"
        passed=$((passed + 1))
    else
        echo "test deploy::$name ... FAILED"
        printf '%s\n' "$out" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
}
skip() {
    echo "test deploy::$1 ... ignored ($2)"
    skipped=$((skipped + 1))
}

venv=.venv-deploy
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
    python3 -m venv "$venv" >/dev/null \
        && "$venv/bin/pip" install --quiet --disable-pip-version-check 'kubernetes-validate==1.37.0'
fi
validate=("$venv/bin/kubernetes-validate" --strict --quiet --no-warn)
py="$venv/bin/python"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The manifests as applied: rendered by kustomize, or file by file.
kube=deploy/kubernetes
if command -v kubectl >/dev/null && kubectl kustomize "$kube" >"$work/rendered.yaml" 2>"$work/kustomize.err"; then
    check kubernetes_schemas_kustomized "${validate[@]}" "$work/rendered.yaml"
else
    [ -s "$work/kustomize.err" ] && check kustomize_renders bash -c 'cat "$1"; false' _ "$work/kustomize.err"
    listed=()
    while IFS= read -r f; do listed+=("$kube/$f"); done < <("$py" -c '
import sys, yaml
print("\n".join(yaml.safe_load(open(sys.argv[1]))["resources"]))' "$kube/kustomization.yaml")
    check kubernetes_schemas_listed_files "${validate[@]}" "${listed[@]}"
fi
check kubernetes_schemas_job "${validate[@]}" "$kube/call-value-router.yaml"
sed 's/^  replicas: 3$/  replicas: three/' "$kube/workflow-node.yaml" >"$work/broken.yaml"
# Refused for the field broken, not for want of the validator.
check kubernetes_schemas_refuse_a_broken_deployment bash -c \
    'out="$("$@" 2>&1)" && exit 1; printf "%s\n" "$out"; grep -q "spec.replicas" <<<"$out"' \
    _ "${validate[@]}" "$work/broken.yaml"

check kubernetes_configmaps_match_the_examples "$py" - <<'PY'
import yaml
def data(path, name):
    for doc in yaml.safe_load_all(open(path)):
        if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == name:
            return doc["data"]
pairs = [
    (data("deploy/kubernetes/workflows.yaml", "workflows")["value_router.yaml"],
     "examples/workflows/value_router.yaml"),
    (data("deploy/kubernetes/stub-agents.yaml", "stub-agents")["agents.yaml"],
     "examples/agents.yaml"),
]
for text, example in pairs:
    assert text == open(example).read(), f"the ConfigMap's copy of {example} differs from it"
PY

check helm_values_three_jetstream_servers_on_file_storage "$py" - <<'PY'
import yaml
config = yaml.safe_load(open("deploy/kubernetes/nats-values.yaml"))["config"]
assert config["cluster"] == {"enabled": True, "replicas": 3}, config["cluster"]
js = config["jetstream"]
assert js["enabled"] and js["fileStore"]["enabled"] and js["fileStore"]["pvc"]["enabled"], js
assert not js["memoryStore"]["enabled"], js
PY

if command -v systemd-analyze >/dev/null; then
    # verify wants the ExecStart binary to exist: this build's stands in for the installed one.
    node="${CARGO_TARGET_DIR:-target}/debug/workflow-node"
    [ -x "$node" ] || node="$(command -v true)"
    sed "s|/usr/local/bin/workflow-node|$(realpath "$node")|" deploy/systemd/workflow-node.service \
        >"$work/workflow-node.service"
    # verify exits 0 on a line it ignores: any output is a failure.
    check systemd_unit_verifies bash -c 'out="$(systemd-analyze verify "$1" 2>&1)"; echo "$out"; [ -z "$out" ]' \
        _ "$work/workflow-node.service"
else
    skip systemd_unit_verifies "no systemd-analyze"
fi

runtime() { sed -n '/^# --- runtime/,$p' "$1"; }
check dockerfiles_share_their_runtime \
    diff <(runtime deploy/container/Dockerfile) <(runtime deploy/container/Dockerfile.source)

echo
status=ok
[ "$failed" -eq 0 ] || status=FAILED
echo "test result: $status. $passed passed; $failed failed; $skipped ignored; 0 measured; 0 filtered out"
[ "$failed" -eq 0 ]
