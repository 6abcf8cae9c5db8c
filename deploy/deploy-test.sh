#!/usr/bin/env bash
# deploy/deploy-test.sh: checks what ships beside the binary, without building the image
# (deploy/image-test.sh does that):
#
#   * the Helm chart (deploy/helm/herald): `helm lint`, `helm template` with the default and
#     the production values, every manifest validated against the Kubernetes schemas by
#     `kubernetes-validate --strict` (a manifest with an unknown field must fail, so the check
#     is known to bite), and the rendered herald.toml with the chart's environment accepted by
#     the real `herald --print-config`;
#   * deploy/compose.yaml: `docker-compose config` (Debian's, which validates against the
#     Compose schema) and `podman-compose config`; every file it mounts exists;
#   * the Prometheus rules and the Grafana dashboard: deploy/observability-test.sh.
#
# Installs what is missing: helm with `go install` (HERALD_HELM_VERSION, default v3.22.0),
# kubernetes-validate and podman-compose with pip, docker-compose and podman with apt-get.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
log() { printf '[deploy-test] %s\n' "$*" >&2; }
passed=0
ok() {
  passed=$((passed + 1))
  log "ok: $*"
}
die() {
  log "ERROR: $*"
  exit 1
}

# ------------------------------------------------------------------ tools
helm_version=${HERALD_HELM_VERSION:-v3.22.0}
helm=$(command -v helm || true)
if [ -z "$helm" ]; then
  helm="$(go env GOPATH)/bin/helm"
  if [ ! -x "$helm" ] || ! "$helm" version --short | grep -q "^${helm_version}"; then
    log "installing helm $helm_version with go install (a few minutes the first time)"
    (cd /tmp && go install "helm.sh/helm/v3/cmd/helm@${helm_version}")
  fi
fi
# Run as modules of this python3, whatever its scripts directory and PATH are.
if ! python3 -c 'import kubernetes_validate, podman_compose' 2>/dev/null; then
  log "installing kubernetes-validate and podman-compose with pip"
  python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate==1.37.0 podman-compose==1.6.0
fi
# podman-compose asks `podman version` before it reads a file, so podman itself is needed too.
missing=()
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v podman >/dev/null || missing+=(podman)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian's ${missing[*]} with apt-get"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
cargo build --quiet -p herald-gateway --bin herald
herald="${CARGO_TARGET_DIR:-$repo/target}/debug/herald"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ------------------------------------------------------------------ Helm
chart=deploy/helm/herald
kube=1.33.0 # the chart needs >= 1.30 (preStop sleep); validated against this version's schemas
for values in default production; do
  args=()
  [ "$values" = production ] && args=(-f "$chart/values-production.yaml")
  "$helm" lint --strict "$chart" "${args[@]}" >"$work/lint.txt" 2>&1 || { cat "$work/lint.txt" >&2; die "helm lint ($values)"; }
  ok "helm lint --strict ($values values)"
  "$helm" template herald "$chart" --namespace herald --kube-version "$kube" "${args[@]}" >"$work/$values.yaml"
  kinds=$(grep -c '^kind:' "$work/$values.yaml")
  python3 -m kubernetes_validate --strict --quiet -k "$kube" "$work/$values.yaml" ||
    die "kubernetes-validate --strict rejected the $values manifests"
  ok "helm template ($values values): $kinds manifests valid against Kubernetes $kube (strict)"

  # The ConfigMap's herald.toml, with the environment the StatefulSet gives the pod.
  env_line=$(python3 - "$work/$values.yaml" "$work/$values.toml" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cm = [d for d in docs if d["kind"] == "ConfigMap"]
assert len(cm) == 1, f"expected one ConfigMap, got {len(cm)}"
open(sys.argv[2], "w").write(cm[0]["data"]["herald.toml"])
sts = [d for d in docs if d["kind"] == "StatefulSet"][0]
pod = sts["spec"]["template"]["spec"]
c = pod["containers"][0]
env = {e["name"]: e.get("value") for e in c["env"]}
grace = int(env["HERALD_SHUTDOWN_GRACE"].rstrip("s"))
pre = c["lifecycle"]["preStop"]["sleep"]["seconds"]
assert pod["terminationGracePeriodSeconds"] > pre + grace, "termination grace must exceed preStop + drain"
assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" and c["livenessProbe"]["httpGet"]["path"] == "/healthz"
assert pod["securityContext"]["runAsNonRoot"] is True
refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]}
assert refs["HERALD_ADMIN_API_KEYS"]["optional"] is False, "the admin key must be required"
print(" ".join(f"{k}={v}" for k, v in env.items() if v is not None))
EOF
)
  # shellcheck disable=SC2086
  env -i PATH="$PATH" $env_line HERALD_NODE_ID=herald-0 HERALD_ADMIN_API_KEYS=deploy-test-admin-key-0123 \
    "$herald" --config "$work/$values.toml" --print-config >"$work/$values.effective" 2>"$work/err.txt" ||
    { cat "$work/err.txt" >&2; die "herald refuses the chart's configuration ($values values)"; }
  grep -q 'admin_listen = "0.0.0.0:9090"' "$work/$values.effective" || die "admin_listen not from the chart"
  ok "herald --print-config accepts the chart's herald.toml and environment ($values values)"
done

# The validator bites: an unknown field in the pod spec is rejected.
sed 's/^      automountServiceAccountToken: false$/      automountServiceAccountToken: false\n      notAField: true/' \
  "$work/default.yaml" >"$work/broken.yaml"
grep -q notAField "$work/broken.yaml" || die "could not make the broken manifest"
if python3 -m kubernetes_validate --strict --quiet -k "$kube" "$work/broken.yaml" >/dev/null 2>&1; then
  die "kubernetes-validate --strict accepted an unknown field"
fi
ok "kubernetes-validate --strict rejects an unknown field (negative control)"

# The chart refuses nothing by default but never leaves the admin port open: a key is made.
grep -q 'admin-api-keys: "[A-Za-z0-9]\{32\}"' "$work/default.yaml" || die "the default Secret has no admin key"
ok "the default values give the admin listener a random key"

# ------------------------------------------------------------------ Compose
docker-compose -f deploy/compose.yaml config -q || die "docker-compose config rejected deploy/compose.yaml"
ok "docker-compose config (Compose schema) accepts deploy/compose.yaml"
python3 -m podman_compose -f deploy/compose.yaml config >"$work/compose.txt" 2>&1 || { cat "$work/compose.txt" >&2; die "podman-compose config"; }
for node in herald-1 herald-2 herald-3; do
  grep -q "^  $node:" "$work/compose.txt" || die "podman-compose config lost $node"
done
ok "podman-compose config accepts deploy/compose.yaml (3 herald nodes)"
missing=$(python3 - <<'EOF'
import os, yaml
c = yaml.safe_load(open("deploy/compose.yaml"))
for name, svc in c["services"].items():
    for v in svc.get("volumes", []):
        src = v.split(":")[0]
        if src.startswith(".") and not os.path.exists(os.path.join("deploy", src)):
            print(f"{name}: {src}")
EOF
)
[ -z "$missing" ] || die "compose mounts missing files: $missing"
ok "every file deploy/compose.yaml mounts exists"

# ------------------------------------------------------------------ rules and dashboard
deploy/observability-test.sh
echo "deploy-test: $passed passed, 0 failed"
