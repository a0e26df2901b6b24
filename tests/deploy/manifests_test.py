#!/usr/bin/python3
"""The Kubernetes manifests and Helm chart of deploy/ checked offline (docs/deploy.md): the chart
rendered by deploy/validate/check.mjs (value substitution only), every object validated against the
Kubernetes 1.27 API schema (npm kubernetes-models, installed by scripts/install-deps.sh) and the
references between them; deploy/kubernetes/stoker.yaml must be the chart rendered with defaults.
Then broken copies must be rejected, naming what is wrong: a wrong type, a selector that selects
nothing, a probe on a port the container lacks, a misspelt field, a missing required field, a Role
for another Deployment, a template construct the renderer cannot render.

Usage: manifests_test.py SOURCE_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SOURCE_DIR = sys.argv[1]
CHECK = os.path.join(SOURCE_DIR, "deploy", "validate", "check.mjs")
MANIFESTS = os.path.join(SOURCE_DIR, "deploy", "kubernetes", "stoker.yaml")


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check(*args):
    r = subprocess.run([NODE, CHECK, *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def expect_rejected(work, name, text, pattern):
    path = os.path.join(work, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(text)
    rc, out = check(path)
    if rc != 1 or not re.search(pattern, out):
        fail(f"the broken manifest '{name}' was not rejected as expected ({pattern!r}): rc {rc}\n"
             f"{out}")
    print(f"rejected {name}: {out.strip().splitlines()[0]}")


NODE = shutil.which("node") or shutil.which("nodejs")


def main():
    if NODE is None:
        fail("node is not installed (scripts/install-deps.sh installs Debian's nodejs)")
    rc, out = check()
    if rc != 0:
        fail(f"deploy/ does not pass its check:\n{out}")
    print(out.strip())
    good = open(MANIFESTS).read()
    for kind in ("StatefulSet", "Deployment", "PodDisruptionBudget", "Role", "RoleBinding",
                 "ServiceAccount"):
        if f"\nkind: {kind}\n" not in good:
            fail(f"deploy/kubernetes/stoker.yaml has no {kind}")
    if "--autoscale=kubernetes" not in good or "--k8s-deployment=stoker-worker" not in good:
        fail("the dispatcher does not run the Kubernetes autoscaler on the workers' Deployment")
    if "fieldPath: status.podIP" not in good or "--host=$(POD_IP)" not in good:
        fail("the workers do not register their pod IP")
    if not re.search(r'resources: \["deployments/scale"\]\n\s+resourceNames: \["stoker-worker"\]\n'
                     r'\s+verbs: \["get", "patch"\]', good):
        fail("the Role does not grant exactly get and patch on the workers' deployments/scale")

    work = tempfile.mkdtemp(prefix="stoker-manifests-")
    try:
        expect_rejected(work, "port-as-text",
                        good.replace("containerPort: 5001", 'containerPort: "5001"'),
                        r"containerPort must be integer")
        expect_rejected(work, "selector-mismatch",
                        good.replace("      app.kubernetes.io/component: worker\n  template:",
                                     "      app.kubernetes.io/component: workers\n  template:"),
                        r"Deployment stoker-worker: spec.selector.matchLabels does not select")
        expect_rejected(work, "probe-port",
                        good.replace("              port: http\n            initialDelaySeconds",
                                     "              port: metrics\n            initialDelaySeconds"),
                        r"livenessProbe uses port metrics")
        expect_rejected(work, "unknown-field",
                        good.replace("            initialDelaySeconds: 5",
                                     "            initialDelaySecond: 5"),
                        r'containers/0/livenessProbe: unknown field "initialDelaySecond"')
        expect_rejected(work, "missing-required",
                        good.replace("roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n"
                                     "  name: stoker-worker-scaler\n", ""),
                        r"RoleBinding stoker-worker-scaler: .*must have required property '?roleRef")
        expect_rejected(work, "autoscaler-not-allowed",
                        good.replace('verbs: ["get", "patch"]', 'verbs: ["get"]'),
                        r"its service account stoker-dispatcher may not patch deployments/scale "
                        r"of stoker-worker")
        expect_rejected(work, "scale-other-deployment",
                        good.replace('resourceNames: ["stoker-worker"]',
                                     'resourceNames: ["stoker-workers"]'),
                        r"Role stoker-worker-scaler scales stoker-workers, no Deployment here")
        # The renderer refuses what it cannot render (helm would evaluate it).
        shutil.copytree(os.path.join(SOURCE_DIR, "deploy"), os.path.join(work, "deploy"),
                        ignore=shutil.ignore_patterns("node_modules"))
        os.symlink(os.path.join(SOURCE_DIR, "deploy", "validate", "node_modules"),
                   os.path.join(work, "deploy", "validate", "node_modules"))
        worker = os.path.join(work, "deploy", "helm", "stoker", "templates", "worker.yaml")
        text = open(worker).read()
        with open(worker, "w") as f:
            f.write(text.replace("  replicas: {{ .Values.worker.replicas }}",
                                 "  {{ if .Values.worker.replicas }}replicas: 2{{ end }}"))
        r = subprocess.run([NODE, os.path.join(work, "deploy", "validate", "check.mjs")],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 1 or "unsupported template construct" not in r.stderr:
            fail(f"a template with {{{{ if }}}} was not refused: {r.returncode} {r.stderr}")
        print(f"refused: {r.stderr.strip().splitlines()[0]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("manifests test: OK")


if __name__ == "__main__":
    main()
