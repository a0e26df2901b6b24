// Offline check of stoker's Kubernetes manifests (docs/deploy.md).
//
//   node deploy/validate/check.mjs            render the Helm chart (deploy/helm/stoker), validate
//                                             it and deploy/kubernetes/stoker.yaml, and check that
//                                             the manifests are the chart rendered with defaults
//   node deploy/validate/check.mjs --write    rewrite deploy/kubernetes/stoker.yaml from the chart
//   node deploy/validate/check.mjs FILE...    validate these manifest files only
//
// Each object is validated against the Kubernetes 1.27 API schema (OpenAPI, as compiled into the
// npm package kubernetes-models 4.5.1, pinned in package-lock.json): types, required fields, enums
// and formats; and, as the API server's strict field validation, no unknown field (from the
// package's type declarations). Then the references between objects that no schema sees: selectors and pod labels, named probe ports, the StatefulSet's
// Service, the service account and the role binding, the autoscaler's permission to patch the
// workers' Deployment's scale, the Prometheus port annotation.
//
// The chart is rendered here, not by helm (not installed): its templates may use only value
// substitution - {{ .Values.a.b }}, {{ .Release.Name }}, {{ .Release.Namespace }},
// {{ .Chart.Name }}, {{ .Chart.Version }}, {{ .Chart.AppVersion }}, each optionally `| quote` -
// and anything else is an error, so what is rendered here is what helm renders.
// Exit status: 0 when everything holds, 1 with one line per problem otherwise.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
let YAML;
try {
  YAML = require("yaml");
  require.resolve("kubernetes-models/apps/v1/Deployment");
} catch (e) {
  console.error(`check: the npm packages are missing in ${here}/node_modules: ` +
                "run scripts/install-deps.sh (npm ci there)");
  process.exit(2);
}
const root = path.resolve(here, "..");
const chartDir = path.join(root, "helm", "stoker");
const manifests = path.join(root, "kubernetes", "stoker.yaml");
const RELEASE = "stoker";
const NAMESPACE = "stoker";

const problems = [];
const problem = (where, what) => problems.push(`${where}: ${what}`);

// --- rendering ------------------------------------------------------------------------------------

const EXPR = /^\s*(\.Values(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.Release\.Name|\.Release\.Namespace|\.Chart\.Name|\.Chart\.Version|\.Chart\.AppVersion)\s*(\|\s*quote\s*)?$/;

function lookup(scope, dotted, where) {
  let v = scope;
  for (const part of dotted.split(".").filter(Boolean)) {
    if (v === null || typeof v !== "object" || !(part in v)) {
      throw new Error(`${where}: ${dotted} is not set`);
    }
    v = v[part];
  }
  if (v === null || typeof v === "object") {
    throw new Error(`${where}: ${dotted} is not a scalar (only value substitution is supported)`);
  }
  return v;
}

function renderChart(dir, release, namespace) {
  const chart = YAML.parse(fs.readFileSync(path.join(dir, "Chart.yaml"), "utf8"));
  const values = YAML.parse(fs.readFileSync(path.join(dir, "values.yaml"), "utf8"));
  const scope = {
    Values: values,
    Release: { Name: release, Namespace: namespace },
    Chart: { Name: chart.name, Version: chart.version, AppVersion: chart.appVersion },
  };
  const out = [];
  const templates = fs.readdirSync(path.join(dir, "templates")).filter((f) => f.endsWith(".yaml"))
    .sort();
  for (const file of templates) {
    const lines = fs.readFileSync(path.join(dir, "templates", file), "utf8").split("\n");
    const rendered = lines.map((line, i) => {
      const where = `templates/${file}:${i + 1}`;
      return line.replace(/\{\{(.*?)\}\}/g, (_, expr) => {
        const m = EXPR.exec(expr);
        if (!m) {
          throw new Error(`${where}: unsupported template construct {{${expr}}}: only value ` +
                          "substitution is rendered here (see deploy/validate/check.mjs)");
        }
        const v = lookup(scope, m[1], where);
        return m[2] ? JSON.stringify(String(v)) : String(v);
      });
    });
    const text = rendered.join("\n");
    if (text.includes("{{") || text.includes("}}")) {
      throw new Error(`templates/${file}: an unclosed or nested {{ }} is left after rendering`);
    }
    out.push(`# Source: stoker/templates/${file}\n${text.trimEnd()}\n`);
  }
  return out.join("---\n");
}

// --- schema validation ----------------------------------------------------------------------------

function modelFor(apiVersion, kind) {
  // "apps/v1" -> kubernetes-models/apps/v1/Kind; "v1" -> kubernetes-models/v1/Kind.
  const module = `kubernetes-models/${apiVersion}/${kind}`;
  try {
    return require(module)[kind];
  } catch (e) {
    return null;
  }
}

function validateSchema(obj, where) {
  if (!obj || typeof obj !== "object") {
    problem(where, "not an object");
    return false;
  }
  if (!obj.apiVersion || !obj.kind) {
    problem(where, "apiVersion and kind are required");
    return false;
  }
  const Model = modelFor(obj.apiVersion, obj.kind);
  if (!Model) {
    problem(where, `${obj.apiVersion} ${obj.kind} is not a Kubernetes 1.27 API type`);
    return false;
  }
  try {
    new Model(obj).validate();
  } catch (e) {
    const details = (e.errors || []).map((x) => `${x.instancePath || "/"} ${x.message}`);
    problem(where, `${obj.kind} ${obj.metadata?.name}: ${details.length ? details.join("; ") :
                                                         e.message}`);
    return false;
  }
  return true;
}

// --- unknown fields --------------------------------------------------------------------------------
// The schema lets unknown fields pass; the API server's strict field validation does not. The
// fields each type has are read from kubernetes-models' type declarations (the .d.ts file of each
// type lists its interface's properties and the types they refer to, generated from the same
// OpenAPI schema), so a misspelt field is caught here too.

const interfaces = new Map();  // .d.ts path -> {props: Map(name -> type), imports: Map(id -> path)}

function parseDeclarations(file) {
  if (interfaces.has(file)) return interfaces.get(file);
  const text = fs.readFileSync(file, "utf8");
  const imports = new Map();
  for (const m of text.matchAll(/^import \{ (\w+) \} from "([^"]+)";$/gm)) {
    const target = m[2].startsWith(".") ? path.resolve(path.dirname(file), m[2])
                                        : path.join(here, "node_modules", m[2]);
    imports.set(m[1], `${target}.d.ts`);
  }
  const props = new Map();
  const body = /^export interface I\w+( extends TypeMeta)? \{\n([\s\S]*?)^\}/m.exec(text);
  if (body) {
    if (body[1]) ["apiVersion", "kind"].forEach((k) => props.set(k, "string;"));
    for (const m of body[2].matchAll(/^ {4}"([^"]+)"\??: (.*)$/gm)) props.set(m[1], m[2]);
  }
  const entry = { props, imports, known: Boolean(body) };
  interfaces.set(file, entry);
  return entry;
}

function checkFields(value, file, where) {
  const decl = parseDeclarations(file);
  if (!decl.known || value === null || typeof value !== "object" || Array.isArray(value)) return;
  for (const [key, child] of Object.entries(value)) {
    if (!decl.props.has(key)) {
      problem(where, `unknown field "${key}"`);
      continue;
    }
    // A reference to another type, alone or as an array's elements; maps and scalars end here.
    const m = /^(?:Array<)?(I\w+)>?;$/.exec(decl.props.get(key));
    const target = m && decl.imports.get(m[1]);
    if (!target) continue;
    const items = Array.isArray(child) ? child : [child];
    items.forEach((item, i) =>
      checkFields(item, target, `${where}/${key}${Array.isArray(child) ? `/${i}` : ""}`));
  }
}

function checkUnknownFields(obj, where) {
  const file = require.resolve(`kubernetes-models/${obj.apiVersion}/${obj.kind}`)
    .replace(/\.js$/, ".d.ts");
  const before = problems.length;
  checkFields(obj, file, `${where}: ${obj.kind} ${obj.metadata?.name} `);
  return problems.length === before;
}

// --- references between objects -------------------------------------------------------------------

const matches = (selector, labels) =>
  Object.entries(selector || {}).every(([k, v]) => labels && labels[k] === v);

function checkReferences(objects, where) {
  const byKind = (kind) => objects.filter((o) => o.kind === kind);
  const workloads = [...byKind("Deployment"), ...byKind("StatefulSet")];
  const names = (kind) => new Set(byKind(kind).map((o) => o.metadata.name));
  for (const w of workloads) {
    const id = `${where}: ${w.kind} ${w.metadata.name}`;
    const labels = w.spec.template.metadata?.labels;
    if (!matches(w.spec.selector.matchLabels, labels)) {
      problems.push(`${id}: spec.selector.matchLabels does not select the pod template's labels`);
    }
    if (w.kind === "StatefulSet") {
      const svc = byKind("Service").find((s) => s.metadata.name === w.spec.serviceName);
      if (!svc) problems.push(`${id}: serviceName ${w.spec.serviceName} names no Service here`);
      else if (svc.spec.clusterIP !== "None") {
        problems.push(`${id}: its Service ${svc.metadata.name} is not headless`);
      }
      const claims = new Set((w.spec.volumeClaimTemplates || []).map((c) => c.metadata.name));
      const vols = new Set((w.spec.template.spec.volumes || []).map((v) => v.name));
      for (const c of w.spec.template.spec.containers) {
        for (const m of c.volumeMounts || []) {
          if (!claims.has(m.name) && !vols.has(m.name)) {
            problems.push(`${id}: container ${c.name} mounts ${m.name}, which is no volume`);
          }
        }
      }
    }
    const pod = w.spec.template.spec;
    if (pod.serviceAccountName && !names("ServiceAccount").has(pod.serviceAccountName)) {
      problems.push(`${id}: serviceAccountName ${pod.serviceAccountName} names no ServiceAccount`);
    }
    const ports = new Map();
    for (const c of pod.containers) {
      for (const p of c.ports || []) ports.set(p.name, p.containerPort);
    }
    const portNumbers = new Set(ports.values());
    for (const c of pod.containers) {
      for (const probe of ["startupProbe", "livenessProbe", "readinessProbe"]) {
        const port = c[probe]?.httpGet?.port;
        if (port === undefined) continue;
        if (typeof port === "string" ? !ports.has(port) : !portNumbers.has(port)) {
          problems.push(`${id}: ${c.name}'s ${probe} uses port ${port}, which it does not expose`);
        }
      }
      if (!c.livenessProbe || !c.readinessProbe) {
        problems.push(`${id}: container ${c.name} lacks a liveness or readiness probe`);
      }
      if (!c.resources?.requests?.cpu || !c.resources?.requests?.memory) {
        problems.push(`${id}: container ${c.name} has no cpu and memory requests`);
      }
    }
    const ann = w.spec.template.metadata?.annotations || {};
    if (ann["prometheus.io/scrape"] !== "true") {
      problems.push(`${id}: the pod template has no prometheus.io/scrape annotation`);
    } else if (!portNumbers.has(Number(ann["prometheus.io/port"]))) {
      problems.push(`${id}: prometheus.io/port ${ann["prometheus.io/port"]} is no container port`);
    }
  }
  for (const s of byKind("Service")) {
    const id = `${where}: Service ${s.metadata.name}`;
    const target = workloads.find((w) => matches(s.spec.selector, w.spec.template.metadata?.labels));
    if (!target) {
      problems.push(`${id}: its selector selects no pod template here`);
      continue;
    }
    const named = new Set(target.spec.template.spec.containers.flatMap((c) => c.ports || [])
      .map((p) => p.name));
    for (const p of s.spec.ports || []) {
      if (typeof p.targetPort === "string" && !named.has(p.targetPort)) {
        problems.push(`${id}: targetPort ${p.targetPort} is no port of ${target.metadata.name}`);
      }
    }
  }
  for (const pdb of byKind("PodDisruptionBudget")) {
    if (!workloads.some((w) => matches(pdb.spec.selector?.matchLabels,
                                       w.spec.template.metadata?.labels))) {
      problems.push(`${where}: PodDisruptionBudget ${pdb.metadata.name} selects no pod template`);
    }
  }
  for (const rb of byKind("RoleBinding")) {
    const id = `${where}: RoleBinding ${rb.metadata.name}`;
    if (rb.roleRef.kind === "Role" && !names("Role").has(rb.roleRef.name)) {
      problems.push(`${id}: roleRef names no Role here (${rb.roleRef.name})`);
    }
    for (const s of rb.subjects || []) {
      if (s.kind === "ServiceAccount" && !names("ServiceAccount").has(s.name)) {
        problems.push(`${id}: subject ${s.name} is no ServiceAccount here`);
      }
    }
  }
  // The autoscaler (--autoscale kubernetes --k8s-deployment NAME) patches NAME's scale with its
  // pod's service account: a Role bound to that account must allow it.
  for (const w of workloads) {
    const pod = w.spec.template.spec;
    for (const c of pod.containers) {
      const arg = (c.args || []).find((a) => a.startsWith("--k8s-deployment="));
      if (!arg) continue;
      const id = `${where}: ${w.kind} ${w.metadata.name}`;
      const target = arg.slice("--k8s-deployment=".length);
      if (!names("Deployment").has(target)) {
        problems.push(`${id}: --k8s-deployment names ${target}, no Deployment here`);
      }
      if (pod.automountServiceAccountToken === false) {
        problems.push(`${id}: the autoscaler needs the service account token mounted`);
      }
      const account = pod.serviceAccountName || "default";
      const allowed = byKind("RoleBinding").some((rb) =>
        (rb.subjects || []).some((s) => s.kind === "ServiceAccount" && s.name === account) &&
        byKind("Role").some((role) => role.metadata.name === rb.roleRef.name &&
          (role.rules || []).some((r) => (r.apiGroups || []).includes("apps") &&
            (r.resources || []).includes("deployments/scale") &&
            (r.verbs || []).includes("patch") &&
            (!r.resourceNames || r.resourceNames.includes(target)))));
      if (!allowed) {
        problems.push(`${id}: its service account ${account} may not patch deployments/scale of ` +
                      `${target} (a Role with that rule, bound to the account, is needed)`);
      }
    }
  }
  for (const role of byKind("Role")) {
    for (const rule of role.rules || []) {
      for (const name of rule.resourceNames || []) {
        if ((rule.resources || []).includes("deployments/scale") && !names("Deployment").has(name)) {
          problems.push(`${where}: Role ${role.metadata.name} scales ${name}, no Deployment here`);
        }
      }
    }
  }
}

function validateText(text, where) {
  const docs = YAML.parseAllDocuments(text);
  const objects = [];
  docs.forEach((doc, i) => {
    if (doc.errors.length) {
      problem(`${where} (document ${i + 1})`, `YAML: ${doc.errors[0].message}`);
      return;
    }
    const obj = doc.toJS();
    if (obj === null) return;  // an empty document
    const id = `${where} (document ${i + 1})`;
    if (validateSchema(obj, id) && checkUnknownFields(obj, id)) objects.push(obj);
  });
  if (!problems.length) checkReferences(objects, where);
  return objects;
}

// --- main -----------------------------------------------------------------------------------------

const args = process.argv.slice(2);
try {
  if (args.length && args[0] !== "--write") {
    for (const file of args) validateText(fs.readFileSync(file, "utf8"), file);
  } else {
    const rendered = renderChart(chartDir, RELEASE, NAMESPACE);
    const header = "# Generated from deploy/helm/stoker (release stoker, namespace stoker, default\n" +
                   "# values) by `node deploy/validate/check.mjs --write`; do not edit by hand.\n";
    if (args[0] === "--write") {
      fs.writeFileSync(manifests, header + rendered);
      console.log(`wrote ${path.relative(process.cwd(), manifests)}`);
    }
    const objects = validateText(rendered, "chart deploy/helm/stoker (rendered)");
    const current = fs.readFileSync(manifests, "utf8");
    if (current !== header + rendered) {
      problem(manifests, "differs from the chart rendered with its defaults: run " +
                         "`node deploy/validate/check.mjs --write` after changing the chart");
    }
    validateText(current, manifests);
    if (!problems.length) {
      const kinds = objects.map((o) => `${o.kind}/${o.metadata.name}`).join(", ");
      console.log(`check: ${objects.length} objects valid against the Kubernetes 1.27 API ` +
                  `schema, references consistent: ${kinds}`);
    }
  }
} catch (e) {
  problems.push(e.message);
}
for (const p of problems) console.error(`check: ${p}`);
process.exit(problems.length ? 1 : 0);
