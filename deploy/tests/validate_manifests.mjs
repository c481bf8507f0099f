// Renders the kustomizations under deploy/k8s and validates every object
// against the Kubernetes OpenAPI schemas (npm `kubernetes-models`, and
// `@kubernetes-models/prometheus-operator` for the Operator's CRDs), then
// checks what the schemas cannot: probes, ports, selectors, ConfigMap
// references, the engines.json of each A/B setup, and that the
// PrometheusRule holds deploy/prometheus/moeserve.rules.yml.
//
// Neither helm nor kubectl is a Debian package, so the kustomizations use a
// small subset of kustomize that render() below implements (anything else
// is refused): resources, namespace, namePrefix/nameSuffix (with ConfigMap
// references in pod specs), labels (includeSelectors / includeTemplates),
// configMapGenerator (files; behavior create|replace|merge; options.labels;
// disableNameSuffixHash), images (kustomize edit set image) and JSON 6902
// `patches`. Where `kubectl` is on PATH
// the rendering is also compared with `kubectl kustomize`.
//
// Usage: node validate_manifests.mjs <node_modules dir> <deploy/k8s dir>
//        <deploy/prometheus/moeserve.rules.yml>
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { pathToFileURL } from "node:url";
import assert from "node:assert/strict";

const [nodeModules, k8sDir, rulesFile] = process.argv.slice(2);
if (!rulesFile) {
  console.error("usage: validate_manifests.mjs NODE_MODULES K8S_DIR RULES_FILE");
  process.exit(2);
}
const load = (p) => import(pathToFileURL(path.join(nodeModules, p)).href);
const yaml = (await load("js-yaml/dist/js-yaml.mjs")).default;

let failures = 0;
let checks = 0;
function check(ok, what) {
  checks++;
  if (!ok) {
    failures++;
    console.error(`FAIL: ${what}`);
  }
}

// ---- models: apiVersion + kind -> class with validate()
const modelModules = {
  "v1": "kubernetes-models/v1/index",
  "apps/v1": "kubernetes-models/apps/v1/index",
  "policy/v1": "kubernetes-models/policy/v1/index",
  "monitoring.coreos.com/v1":
    "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/index",
};
const loadedModels = {};
async function modelFor(apiVersion, kind) {
  const mod = modelModules[apiVersion];
  if (!mod) return null;
  // The ES module: index.mjs up to kubernetes-models 4, index.js from 5 on.
  const file = fs.existsSync(path.join(nodeModules, mod + ".mjs")) ? mod + ".mjs" : mod + ".js";
  loadedModels[apiVersion] ??= await load(file);
  const cls = loadedModels[apiVersion][kind];
  return typeof cls === "function" && cls.kind === kind ? cls : null;
}
async function schemaErrors(obj) {
  const cls = await modelFor(obj.apiVersion, obj.kind);
  if (!cls) return `no schema for ${obj.apiVersion} ${obj.kind}`;
  try {
    new cls(structuredClone(obj)).validate();
    return null;
  } catch (e) {
    return e.message;
  }
}

// ---- the kustomize subset
const KNOWN_KEYS = new Set([
  "apiVersion", "kind", "resources", "namespace", "namePrefix", "nameSuffix",
  "labels", "configMapGenerator", "generatorOptions", "patches", "images",
]);
const id = (o) => `${o.kind}/${o.metadata.name}`;
const readYamlDocs = (file) =>
  yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d != null);

function podSpecs(obj) {
  if (["Deployment", "StatefulSet", "DaemonSet", "Job"].includes(obj.kind)) {
    return [obj.spec?.template?.spec].filter(Boolean);
  }
  if (obj.kind === "Pod") return [obj.spec].filter(Boolean);
  return [];
}
function configMapRefs(obj) {
  // [holder, key] pairs whose holder[key] names a ConfigMap.
  const refs = [];
  for (const spec of podSpecs(obj)) {
    for (const v of spec.volumes ?? []) {
      if (v.configMap) refs.push([v.configMap, "name"]);
      for (const s of v.projected?.sources ?? []) {
        if (s.configMap) refs.push([s.configMap, "name"]);
      }
    }
    for (const c of [...(spec.containers ?? []), ...(spec.initContainers ?? [])]) {
      for (const e of c.env ?? []) {
        if (e.valueFrom?.configMapKeyRef) refs.push([e.valueFrom.configMapKeyRef, "name"]);
      }
      for (const e of c.envFrom ?? []) {
        if (e.configMapRef) refs.push([e.configMapRef, "name"]);
      }
    }
  }
  return refs;
}
function addLabels(obj, pairs, includeSelectors, includeTemplates) {
  obj.metadata.labels = { ...(obj.metadata.labels ?? {}), ...pairs };
  const workload = ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"];
  if (includeSelectors || includeTemplates) {
    if (workload.includes(obj.kind) || obj.kind === "Job") {
      const t = (obj.spec.template.metadata ??= {});
      t.labels = { ...(t.labels ?? {}), ...pairs };
    }
  }
  if (includeSelectors) {
    if (workload.includes(obj.kind)) {
      const s = (obj.spec.selector ??= {});
      s.matchLabels = { ...(s.matchLabels ?? {}), ...pairs };
    }
    if (obj.kind === "Service") {
      obj.spec.selector = { ...(obj.spec.selector ?? {}), ...pairs };
    }
    if (obj.kind === "PodDisruptionBudget") {
      const s = (obj.spec.selector ??= {});
      s.matchLabels = { ...(s.matchLabels ?? {}), ...pairs };
    }
  }
}
function pointer(p) {
  return p.split("/").slice(1).map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"));
}
function applyJson6902(obj, ops) {
  for (const op of ops) {
    const keys = pointer(op.path);
    const last = keys.pop();
    let parent = obj;
    for (const k of keys) {
      parent = Array.isArray(parent) ? parent[Number(k)] : parent?.[k];
      if (parent === undefined) throw new Error(`patch path ${op.path}: no parent`);
    }
    if (op.op === "add" || op.op === "replace") {
      if (op.op === "replace" && !(last in parent)) {
        throw new Error(`patch replace ${op.path}: nothing there`);
      }
      if (Array.isArray(parent)) {
        if (last === "-") parent.push(op.value);
        else if (op.op === "add") parent.splice(Number(last), 0, op.value);
        else parent[Number(last)] = op.value;
      } else {
        parent[last] = op.value;
      }
    } else if (op.op === "remove") {
      if (Array.isArray(parent)) parent.splice(Number(last), 1);
      else delete parent[last];
    } else {
      throw new Error(`patch op ${op.op} is not supported here`);
    }
  }
}
function matchesTarget(obj, t) {
  return (!t.kind || t.kind === obj.kind) && (!t.name || t.name === obj.metadata.name) &&
    (!t.group || (obj.apiVersion.includes("/") && obj.apiVersion.split("/")[0] === t.group)) &&
    (!t.version || obj.apiVersion.split("/").pop() === t.version);
}

function render(dir) {
  const kfile = path.join(dir, "kustomization.yaml");
  const k = yaml.load(fs.readFileSync(kfile, "utf8"));
  for (const key of Object.keys(k)) {
    if (!KNOWN_KEYS.has(key)) throw new Error(`${kfile}: kustomize key '${key}' is not supported by this renderer`);
  }
  let objs = [];
  for (const r of k.resources ?? []) {
    const p = path.join(dir, r);
    if (fs.statSync(p).isDirectory()) objs.push(...render(p));
    else objs.push(...readYamlDocs(p));
  }
  // Generators.
  const genOpts = k.generatorOptions ?? {};
  for (const g of k.configMapGenerator ?? []) {
    if (!genOpts.disableNameSuffixHash) {
      throw new Error(`${kfile}: configMapGenerator needs generatorOptions.disableNameSuffixHash: true here`);
    }
    for (const key of Object.keys(g)) {
      if (!["name", "behavior", "files", "options"].includes(key)) {
        throw new Error(`${kfile}: configMapGenerator key '${key}' is not supported`);
      }
    }
    const data = {};
    for (const f of g.files ?? []) {
      const [key, file] = f.includes("=") ? f.split("=", 2) : [path.basename(f), f];
      data[key] = fs.readFileSync(path.join(dir, file), "utf8");
    }
    const behavior = g.behavior ?? "create";
    const existing = objs.find((o) => o.kind === "ConfigMap" && o.metadata.name === g.name);
    const labels = { ...(genOpts.labels ?? {}), ...(g.options?.labels ?? {}) };
    if (behavior === "create") {
      if (existing) throw new Error(`${kfile}: ConfigMap ${g.name} exists already`);
      const cm = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: g.name }, data };
      if (Object.keys(labels).length) cm.metadata.labels = labels;
      objs.push(cm);
    } else {
      if (!existing) throw new Error(`${kfile}: ConfigMap ${g.name} to ${behavior} is not there`);
      existing.data = behavior === "replace" ? data : { ...existing.data, ...data };
      if (Object.keys(labels).length) {
        existing.metadata.labels = { ...(existing.metadata.labels ?? {}), ...labels };
      }
    }
  }
  // Patches (targets by the names before this level's prefix/suffix).
  for (const p of k.patches ?? []) {
    if (!p.target || !p.patch) throw new Error(`${kfile}: patches need target and inline patch`);
    const ops = yaml.load(p.patch);
    if (!Array.isArray(ops)) throw new Error(`${kfile}: only JSON 6902 patches are supported`);
    const hits = objs.filter((o) => matchesTarget(o, p.target));
    if (!hits.length) throw new Error(`${kfile}: patch target ${JSON.stringify(p.target)} matches nothing`);
    for (const o of hits) applyJson6902(o, ops);
  }
  if (k.namespace) {
    for (const o of objs) o.metadata.namespace = k.namespace;
  }
  if (k.namePrefix || k.nameSuffix) {
    const renamed = {};
    for (const o of objs) {
      const name = `${k.namePrefix ?? ""}${o.metadata.name}${k.nameSuffix ?? ""}`;
      if (o.kind === "ConfigMap") renamed[o.metadata.name] = name;
      o.metadata.name = name;
    }
    for (const o of objs) {
      for (const [holder, key] of configMapRefs(o)) {
        if (holder[key] in renamed) holder[key] = renamed[holder[key]];
      }
    }
  }
  for (const l of k.labels ?? []) {
    for (const o of objs) addLabels(o, l.pairs, l.includeSelectors, l.includeTemplates);
  }
  for (const img of k.images ?? []) {
    for (const o of objs) {
      for (const spec of podSpecs(o)) {
        for (const c of [...(spec.containers ?? []), ...(spec.initContainers ?? [])]) {
          const m = /^(.*?)(?::([^:/@]+))?(?:@(.+))?$/.exec(c.image);
          if (m[1] !== img.name) continue;
          const name = img.newName ?? m[1];
          if (img.digest) c.image = `${name}@${img.digest}`;
          else if (img.newTag ?? m[2]) c.image = `${name}:${img.newTag ?? m[2]}`;
          else c.image = name;
        }
      }
    }
  }
  const seen = new Set();
  for (const o of objs) {
    const key = `${id(o)}@${o.metadata.namespace ?? ""}`;
    if (seen.has(key)) throw new Error(`${kfile}: ${key} twice`);
    seen.add(key);
  }
  return objs;
}

// ---- semantic checks of one rendered tree
const matches = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);
function flag(args, name) {
  const hit = (args ?? []).find((a) => a.startsWith(`--${name}=`));
  return hit === undefined ? undefined : hit.slice(name.length + 3);
}

function checkWorkloads(where, objs) {
  const deployments = objs.filter((o) => o.kind === "Deployment");
  const services = objs.filter((o) => o.kind === "Service");
  const configMaps = objs.filter((o) => o.kind === "ConfigMap");
  const monitors = objs.filter((o) => o.kind === "ServiceMonitor");
  check(deployments.length > 0, `${where}: no Deployment`);
  for (const d of deployments) {
    const at = `${where}: ${id(d)}`;
    const tmpl = d.spec.template;
    check(matches(d.spec.selector.matchLabels, tmpl.metadata.labels),
      `${at}: selector ${JSON.stringify(d.spec.selector.matchLabels)} does not match the pod labels`);
    // Each Deployment's pods belong to its own Service(s) only.
    for (const other of deployments) {
      if (other !== d) {
        check(!matches(d.spec.selector.matchLabels, other.spec.template.metadata.labels),
          `${at}: selector also matches the pods of ${id(other)}`);
      }
    }
    const c = tmpl.spec.containers.find((x) => x.name === "moeserve");
    check(!!c, `${at}: no container 'moeserve'`);
    if (!c) continue;
    const ports = Object.fromEntries((c.ports ?? []).map((p) => [p.name, p.containerPort]));
    const grpcPort = Number(flag(c.args, "port"));
    const metricsPort = Number(flag(c.args, "metrics_port"));
    check(ports.grpc === grpcPort, `${at}: containerPort 'grpc' ${ports.grpc} != --port ${grpcPort}`);
    check(ports.metrics === metricsPort, `${at}: containerPort 'metrics' ${ports.metrics} != --metrics_port ${metricsPort}`);
    const httpPort = Number(flag(c.args, "http_port") ?? 0);
    check((ports.http ?? 0) === httpPort, `${at}: containerPort 'http' ${ports.http} != --http_port ${httpPort}`);
    check(flag(c.args, "host") === "0.0.0.0", `${at}: --host must be 0.0.0.0 to be reachable in a pod`);
    for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
      check(c[probe]?.grpc?.port === grpcPort,
        `${at}: ${probe} must be a grpc (grpc.health.v1) probe on --port ${grpcPort}`);
    }
    const s = c.startupProbe ?? {};
    const startupSeconds = (s.periodSeconds ?? 10) * (s.failureThreshold ?? 3);
    check(startupSeconds >= 600, `${at}: startupProbe allows ${startupSeconds} s for model loading, want >= 600`);
    check(c.resources?.requests?.cpu && c.resources?.requests?.memory,
      `${at}: resources.requests needs cpu and memory`);
    const threads = Number(flag(c.args, "threads"));
    check(Number.isInteger(threads) && threads > 0, `${at}: --threads should match the cpu request`);
    const ann = tmpl.metadata.annotations ?? {};
    check(ann["prometheus.io/scrape"] === "true" && Number(ann["prometheus.io/port"]) === metricsPort &&
      ann["prometheus.io/path"] === "/metrics", `${at}: prometheus.io scrape annotations`);
    const drain = Number(flag(c.args, "drain_seconds") ?? 30);
    check(tmpl.spec.terminationGracePeriodSeconds > drain,
      `${at}: terminationGracePeriodSeconds must exceed --drain_seconds ${drain}`);
    // --engines_config names a file of a mounted ConfigMap.
    const cfg = flag(c.args, "engines_config");
    check(!!cfg, `${at}: no --engines_config`);
    const mount = (c.volumeMounts ?? []).find((m) => cfg?.startsWith(m.mountPath + "/"));
    check(!!mount, `${at}: --engines_config=${cfg} is on no volumeMount`);
    if (!cfg || !mount) continue;
    const vol = tmpl.spec.volumes.find((v) => v.name === mount.name);
    const cm = configMaps.find((m) => m.metadata.name === vol?.configMap?.name &&
      m.metadata.namespace === d.metadata.namespace);
    check(!!cm, `${at}: volume ${mount.name} names ConfigMap ${vol?.configMap?.name}, not rendered`);
    if (!cm) continue;
    const key = cfg.slice(mount.mountPath.length + 1);
    check(key in (cm.data ?? {}), `${at}: ConfigMap ${cm.metadata.name} has no key ${key}`);
    let engines;
    try {
      engines = JSON.parse(cm.data[key]);
    } catch (e) {
      check(false, `${at}: ${cm.metadata.name}/${key} is not JSON: ${e.message}`);
      continue;
    }
    const names = (engines.engines ?? []).map((e) => e.name);
    check(names.length > 0, `${at}: ${key} lists no engines`);
    for (const n of Object.keys(engines.ab ?? {})) {
      check(names.includes(n), `${at}: ${key} ab names '${n}', not an engine`);
    }
    // Services of this Deployment: their target ports are container ports.
    const mine = services.filter((sv) => sv.metadata.namespace === d.metadata.namespace &&
      Object.keys(sv.spec.selector ?? {}).length && matches(sv.spec.selector, tmpl.metadata.labels));
    check(mine.length === 1, `${at}: ${mine.length} Services select its pods, want 1`);
    for (const sv of mine) {
      for (const p of sv.spec.ports) {
        check(typeof p.targetPort === "string" ? p.targetPort in ports : Object.values(ports).includes(p.targetPort),
          `${at}: ${id(sv)} port ${p.name} targets ${p.targetPort}, not a container port`);
      }
      const mons = monitors.filter((m) => matches(m.spec.selector.matchLabels, sv.metadata.labels));
      check(mons.length === 1, `${where}: ${mons.length} ServiceMonitors select ${id(sv)}, want 1`);
      for (const m of mons) {
        for (const ep of m.spec.endpoints) {
          check(sv.spec.ports.some((p) => p.name === ep.port),
            `${where}: ${id(m)} endpoint port ${ep.port} is not a port of ${id(sv)}`);
        }
      }
    }
  }
  for (const m of monitors) {
    const n = services.filter((sv) => matches(m.spec.selector.matchLabels, sv.metadata.labels)).length;
    check(n === 1, `${where}: ${id(m)} selects ${n} Services, want 1 (its own setup's)`);
  }
}

async function checkSchemas(where, objs) {
  for (const o of objs) {
    const err = await schemaErrors(o);
    check(err === null, `${where}: ${id(o)} fails the ${o.apiVersion} ${o.kind} schema: ${err}`);
  }
}

function sortedDeep(x) {
  if (Array.isArray(x)) return x.map(sortedDeep);
  if (x && typeof x === "object") {
    return Object.fromEntries(Object.keys(x).sort().map((k) => [k, sortedDeep(x[k])]));
  }
  return x;
}
function kubectlPath() {
  for (const d of (process.env.PATH ?? "").split(":")) {
    if (d && fs.existsSync(path.join(d, "kubectl"))) return path.join(d, "kubectl");
  }
  return null;
}

// ---- main
const roots = [k8sDir, ...fs.readdirSync(path.join(k8sDir, "setups")).map((s) => path.join(k8sDir, "setups", s))];
const kubectl = kubectlPath();
let rendered = 0;
let setupCount = 0;
for (const dir of roots) {
  const where = path.relative(path.dirname(k8sDir), dir) || dir;
  let objs;
  try {
    objs = render(dir);
  } catch (e) {
    check(false, `${where}: ${e.message}`);
    continue;
  }
  rendered += objs.length;
  if (dir !== k8sDir) setupCount++;
  await checkSchemas(where, objs);
  checkWorkloads(where, objs);
  if (kubectl) {
    // kubectl is not a Debian package: a cross-check where it happens to be;
    // where it is, a kustomization it cannot render is a failure.
    try {
      const out = execFileSync(kubectl, ["kustomize", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
      const theirs = yaml.loadAll(out).filter(Boolean);
      const key = (o) => `${id(o)}@${o.metadata.namespace ?? ""}`;
      const a = Object.fromEntries(objs.map((o) => [key(o), sortedDeep(o)]));
      const b = Object.fromEntries(theirs.map((o) => [key(o), sortedDeep(o)]));
      try {
        assert.deepEqual(a, b);
        check(true, "");
      } catch (e) {
        check(false, `${where}: rendering differs from kubectl kustomize:\n${e.message}`);
      }
    } catch (e) {
      check(false, `${where}: kubectl kustomize failed: ${e.message.split("\n")[0]}`);
    }
  }
}
check(setupCount >= 2, `want >= 2 A/B setups under ${k8sDir}/setups, got ${setupCount}`);

// Files applied on their own (not in a kustomization), e.g. the PodMonitor.
for (const f of fs.readdirSync(k8sDir).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml")) {
  const docs = readYamlDocs(path.join(k8sDir, f));
  check(docs.length > 0, `${f}: empty`);
  await checkSchemas(f, docs);
}

// The PrometheusRule holds exactly the promtool-tested rules.
const rules = yaml.load(fs.readFileSync(rulesFile, "utf8"));
const pr = readYamlDocs(path.join(k8sDir, "monitoring", "prometheusrule.yaml"))[0];
try {
  assert.deepEqual(pr.spec.groups, rules.groups);
  check(true, "");
} catch (e) {
  check(false, "monitoring/prometheusrule.yaml differs from " +
    "deploy/prometheus/moeserve.rules.yml: rerun deploy/tests/gen_prometheusrule.py\n" + e.message.slice(0, 2000));
}

// The validation bites: broken copies of a rendered Deployment and
// ServiceMonitor are refused by the schemas.
{
  const objs = render(roots[1]);
  const d = objs.find((o) => o.kind === "Deployment");
  const m = objs.find((o) => o.kind === "ServiceMonitor");
  const broken = [
    ["replicas as a string", d, (x) => { x.spec.replicas = "1"; }],
    ["a named grpc probe port", d, (x) => { x.spec.template.spec.containers[0].startupProbe.grpc.port = "grpc"; }],
    ["a cpu request that is no quantity", d, (x) => { x.spec.template.spec.containers[0].resources.requests.cpu = "two"; }],
    ["no containers", d, (x) => { delete x.spec.template.spec.containers; }],
    ["endpoints as an object", m, (x) => { x.spec.endpoints = { port: "metrics" }; }],
  ];
  for (const [what, obj, mutate] of broken) {
    const copy = structuredClone(obj);
    mutate(copy);
    check((await schemaErrors(copy)) !== null, `the schema accepted a ${obj.kind} with ${what}`);
  }
}

console.log(`manifests: ${roots.length} kustomizations (${setupCount} A/B setups), ` +
  `${rendered} rendered objects, kubectl cross-check: ${kubectl ? "yes" : "no (kubectl absent)"}`);
console.log(`${checks - failures} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
