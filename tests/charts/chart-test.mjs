// Chart tests: lint, render scenarios, validate every rendered object
// against the API schemas (validate.mjs), and check the properties the
// chart promises (drain-covering grace period, probes, no secret in a
// ConfigMap, existingSecret honoured, KEDA trigger, HPA fallback, refusals).
//
//   node chart-test.mjs lint
//   node chart-test.mjs render SCENARIO
//   node chart-test.mjs refuse CASE
//   node chart-test.mjs flags WORKER_BIN DISPATCHER_BIN
//
// Environment: RUNNEL_CHART_TOOLS = the directory tools.sh filled (bin/helm,
// node/node_modules). Prints "N passed, N failed" and exits non-zero on any
// failure.

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const chart = path.resolve(here, "../../charts/runnel");
const valuesDir = path.join(here, "values");
const tools = process.env.RUNNEL_CHART_TOOLS;
if (!tools || !fs.existsSync(path.join(tools, "bin/helm"))) {
  console.error("chart-test: RUNNEL_CHART_TOOLS must name the directory tests/charts/tools.sh filled");
  process.exit(2);
}
process.env.RUNNEL_CHART_NODE_MODULES = path.join(tools, "node/node_modules");
const helm = path.join(tools, "bin/helm");
// js-yaml straight from the tools' node_modules; validate.mjs (which loads
// the TypeScript checker, the slow part) only when a scenario renders.
const yaml = createRequire(path.join(process.env.RUNNEL_CHART_NODE_MODULES, "noop.js"))("js-yaml");

// Helm keeps its caches and config out of $HOME.
const helmHome = fs.mkdtempSync(path.join(process.env.TMPDIR || "/tmp", "runnel-helm-"));
process.on("exit", () => fs.rmSync(helmHome, { recursive: true, force: true }));
const helmEnv = {
  ...process.env,
  HELM_CACHE_HOME: path.join(helmHome, "cache"),
  HELM_CONFIG_HOME: path.join(helmHome, "config"),
  HELM_DATA_HOME: path.join(helmHome, "data"),
};

let passed = 0;
let failed = 0;
function check(name, fn) {
  try {
    fn();
    passed++;
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.message}`);
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
function eq(actual, expected, what) {
  assert(
    JSON.stringify(actual) === JSON.stringify(expected),
    `${what}: got ${JSON.stringify(actual)}, want ${JSON.stringify(expected)}`,
  );
}

function helmRun(args) {
  return spawnSync(helm, args, { env: helmEnv, encoding: "utf8", timeout: 60000 });
}
function valuesArgs(name) {
  return name === "defaults" ? [] : ["-f", path.join(valuesDir, `${name}.yaml`)];
}

// Every scenario renders without error; its values file names the secrets
// (plain strings) that must never appear outside a Secret.
const SCENARIOS = {
  defaults: { autoscaler: "hpa", secrets: [] },
  keda: { autoscaler: "keda", secrets: ["s3cr3t-kafka-pw", "k3da-p@ss:w/rd"] },
  hpa: { autoscaler: "hpa", secrets: [] },
  fixed: { autoscaler: "none", secrets: [] },
  secrets: {
    autoscaler: "hpa",
    secrets: [
      "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
      "tok-9b7f2c1d-dispatcher",
      "whsec-5b1c9e7a-webhooks",
      "p@ss:w/rd-redis-31",
      "kafka-user-77",
      "kafka-pass-88",
      "ssl-key-pass-99",
    ],
  },
  "existing-secret": { autoscaler: "keda", secrets: [], existingSecret: "runnel-prod-secrets", compose: true },
  "existing-secret-whole": { autoscaler: "keda", secrets: [], existingSecret: "runnel-prod-secrets" },
  "redis-url-secret": { autoscaler: "hpa", secrets: ["url-pass-4242"] },
  "redis-cluster": { autoscaler: "keda", secrets: ["cl-pass-5150"] },
  ingress: { autoscaler: "hpa", secrets: [] },
  networkpolicy: { autoscaler: "hpa", secrets: [] },
  servicemonitor: { autoscaler: "hpa", secrets: [] },
  "process-ack": { autoscaler: "hpa", secrets: [], sandbox: "process" },
  limits: { autoscaler: "hpa", secrets: [], delegate: true },
  // Helm's longest release name (53 characters), everything optional on.
  "long-names": { autoscaler: "keda", secrets: [], release: "r".repeat(20) + "-long-release-name-for-truncation" },
  "more-workers-than-partitions": { autoscaler: "keda", secrets: [] },
  "no-auth": { autoscaler: "hpa", secrets: [] },
};

// Each of these must fail to render, with this message.
const REFUSALS = {
  "process-noack": "acknowledge it with worker.sandbox.iUnderstandProcessModeIsolatesNothing=true",
  "grace-too-short": "worker.terminationGracePeriodSeconds (60) must be greater than worker.drainSec (60)",
  "unmasked-hostusers": "worker.sandbox.procMount=Unmasked needs worker.sandbox.hostUsers=false",
  "bad-sandbox-network": "at '/worker/sandbox/network': value must be one of 'none', 'host'",
  "hpa-scale-to-zero": "worker.autoscaling.minReplicas must be >= 1 for the HPA",
  "netpol-no-workspace": "networkPolicy.enabled needs networkPolicy.workspace.cidrs",
  "props-beside-secret-list": "secret.kafkaPropertiesFromSecret takes the whole librdkafka list from the Secret",
  "semicolon-property": "kafka.properties.ssl.cipher.suites: values must not contain \";\"",
  "delegate-hostusers": "worker.limits.delegateCgroup needs worker.sandbox.hostUsers=false",
  "webhooks-no-secret": "webhooks.enabled needs webhooks.secret (or secret.existingSecret)",
  "redis-cluster-db": "redis.cluster needs database 0 (redis.db, and the path of redis.auth.url): a Redis Cluster has no other",
  "redis-cluster-url-db": "redis.cluster needs database 0 (redis.db, and the path of redis.auth.url): a Redis Cluster has no other",
};

const SECRET_NAME_RE = /JOB_KEY|API_TOKEN|PASSWORD|SASL|SECRET|TOKEN/i;

function byKind(docs, kind) {
  return docs.filter((d) => d.kind === kind);
}
function component(docs, kind, comp) {
  const found = docs.filter(
    (d) => d.kind === kind && d.metadata.labels && d.metadata.labels["app.kubernetes.io/component"] === comp,
  );
  assert(found.length === 1, `expected one ${kind} for ${comp}, found ${found.length}`);
  return found[0];
}
function container(dep) {
  const cs = dep.spec.template.spec.containers;
  assert(cs.length === 1, `${dep.metadata.name}: expected one container`);
  return cs[0];
}
function subset(sel, labels) {
  return Object.entries(sel).every(([k, v]) => labels[k] === v);
}

async function render(name) {
  const sc = SCENARIOS[name];
  assert(sc, `unknown scenario ${name}`);
  const r = helmRun(["template", sc.release || "rt", chart, "--namespace", "runnel", ...valuesArgs(name)]);
  if (r.status !== 0) throw new Error(`helm template failed: ${r.stderr}`);
  const text = r.stdout;
  const docs = yaml.loadAll(text).filter(Boolean);
  const rawDocs = text.split(/^---\s*$/m);

  const { createValidator } = await import("./validate.mjs");
  const v = await createValidator();
  await v.prepare(docs);
  for (const d of docs) {
    const errs = await v.validate(d);
    check(`schema ${d.kind}/${d.metadata.name}`, () => assert(errs.length === 0, errs.join("; ")));
  }

  const disp = component(docs, "Deployment", "dispatcher");
  const work = component(docs, "Deployment", "worker");
  const cms = byKind(docs, "ConfigMap");
  const cmByName = new Map(cms.map((c) => [c.metadata.name, c]));
  const secrets = byKind(docs, "Secret");
  const secretByName = new Map(secrets.map((s) => [s.metadata.name, s]));
  const workerCm = cmByName.get(work.spec.template.spec.containers[0].envFrom[0].configMapRef.name);

  check("names and labels are valid Kubernetes names", () => {
    const dns1123 = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
    const labelValue = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
    const seen = new Set();
    for (const d of docs) {
      const n = d.metadata.name;
      assert(n.length <= 63 && dns1123.test(n), `${d.kind} name "${n}"`);
      if (d.kind === "Service") assert(/^[a-z]/.test(n), `Service name "${n}" must start with a letter`);
      assert(!seen.has(`${d.kind}/${n}`), `duplicate ${d.kind}/${n}`);
      seen.add(`${d.kind}/${n}`);
      const labelSets = [d.metadata.labels || {}];
      if (d.spec && d.spec.template) labelSets.push(d.spec.template.metadata.labels || {});
      for (const labels of labelSets) {
        for (const [k, v] of Object.entries(labels)) {
          assert(typeof v === "string" && v.length <= 63 && labelValue.test(v), `${d.kind}/${n} label ${k}=${v}`);
        }
      }
    }
  });

  check("worker grace period exceeds RUNNEL_DRAIN_SEC", () => {
    assert(workerCm, "worker ConfigMap not found through envFrom");
    const drain = Number(workerCm.data.RUNNEL_DRAIN_SEC);
    const grace = work.spec.template.spec.terminationGracePeriodSeconds;
    assert(Number.isInteger(drain), `RUNNEL_DRAIN_SEC ${workerCm.data.RUNNEL_DRAIN_SEC}`);
    assert(Number.isInteger(grace) && grace > drain, `terminationGracePeriodSeconds ${grace} <= drain ${drain}`);
  });

  check("probes on both Deployments", () => {
    const dc = container(disp);
    const wc = container(work);
    eq(dc.livenessProbe.httpGet.path, "/healthz", "dispatcher liveness path");
    // With a token the dispatcher answers /readyz only to callers that send it.
    const auth = (dc.env || []).some((e) => e.name === "RUNNEL_API_TOKEN");
    eq(dc.readinessProbe.httpGet.path, auth ? "/healthz" : "/readyz", "dispatcher readiness path");
    eq(dc.livenessProbe.httpGet.port, "http", "dispatcher liveness port");
    eq(wc.livenessProbe.httpGet.path, "/healthz", "worker liveness path");
    eq(wc.livenessProbe.httpGet.port, "metrics", "worker liveness port");
    assert(wc.readinessProbe && wc.readinessProbe.httpGet, "worker readiness probe");
    eq(wc.readinessProbe.httpGet.path, "/readyz", "worker readiness path");
    eq(dc.ports.map((p) => p.name), ["http"], "dispatcher ports");
    eq(wc.ports.map((p) => p.name), ["metrics"], "worker ports");
    const dcm = cmByName.get(dc.envFrom[0].configMapRef.name);
    eq(dcm.data.RUNNEL_LISTEN, `0.0.0.0:${dc.ports[0].containerPort}`, "RUNNEL_LISTEN");
    eq(workerCm.data.RUNNEL_METRICS_LISTEN, `0.0.0.0:${wc.ports[0].containerPort}`, "RUNNEL_METRICS_LISTEN");
  });

  check("no secret in any ConfigMap", () => {
    for (const cm of cms) {
      for (const [k, val] of Object.entries(cm.data || {})) {
        assert(!SECRET_NAME_RE.test(k), `ConfigMap ${cm.metadata.name} holds ${k}`);
        // The egress allowlist names hosts by "@name": an "@" that opens an
        // item is not a URL's user part.
        const v = k === "RUNNEL_EGRESS_ALLOW" ? val.split(",").map((x) => x.trim().replace(/^@[a-z_]+$/, "")).join(",") : val;
        assert(!/password|sasl\.username|@/i.test(v) || k === "RUNNEL_KAFKA_BROKERS",
          `ConfigMap ${cm.metadata.name} ${k} looks like it carries a credential: ${val}`);
        for (const s of sc.secrets) assert(!val.includes(s), `ConfigMap ${cm.metadata.name} ${k} contains a secret`);
      }
    }
  });

  check("secrets appear only inside Secrets", () => {
    for (const raw of rawDocs) {
      if (/^kind: Secret$/m.test(raw)) continue;
      for (const s of sc.secrets) assert(!raw.includes(s), `secret ${s.slice(0, 4)}… rendered outside a Secret`);
    }
  });

  check("environment references resolve", () => {
    for (const dep of [disp, work]) {
      const c = container(dep);
      const defined = new Set();
      for (const ef of c.envFrom || []) {
        const cm = cmByName.get(ef.configMapRef.name);
        assert(cm, `${dep.metadata.name}: envFrom ConfigMap ${ef.configMapRef.name} not rendered`);
        for (const k of Object.keys(cm.data)) defined.add(k);
      }
      for (const e of c.env || []) {
        if (SECRET_NAME_RE.test(e.name) || e.name === "RUNNEL_JOB_KEY") {
          assert(e.valueFrom && (e.valueFrom.secretKeyRef || e.name === "RUNNEL_KAFKA_PUBLIC_PROPERTIES"),
            `${dep.metadata.name}: ${e.name} must come from a secretKeyRef`);
        }
        if (e.valueFrom && e.valueFrom.secretKeyRef) {
          const ref = e.valueFrom.secretKeyRef;
          if (sc.existingSecret) {
            eq(ref.name, sc.existingSecret, `${dep.metadata.name} ${e.name} secret name`);
          } else {
            const s = secretByName.get(ref.name);
            assert(s, `${dep.metadata.name}: ${e.name} refers to Secret ${ref.name}, not rendered`);
            assert(s.data && ref.key in s.data, `${dep.metadata.name}: Secret ${ref.name} has no key ${ref.key}`);
          }
        }
        if (e.valueFrom && e.valueFrom.configMapKeyRef) {
          const ref = e.valueFrom.configMapKeyRef;
          const cm = cmByName.get(ref.name);
          assert(cm && ref.key in cm.data, `${dep.metadata.name}: ${e.name} refers to ${ref.name}/${ref.key}`);
        }
        // $(VAR) expands only from variables defined before it.
        for (const m of String(e.value || "").matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
          assert(defined.has(m[1]), `${dep.metadata.name}: ${e.name} uses $(${m[1]}) before it is defined`);
        }
        defined.add(e.name);
      }
    }
  });

  // The worker wipes RUNNEL_JOB_KEY, RUNNEL_WEBHOOK_SECRET, RUNNEL_REDIS_URL and
  // RUNNEL_KAFKA_PROPERTIES from its environment at start; any other secret
  // variable would stay there.
  check("the worker gets secrets only in variables it wipes", () => {
    const wiped = new Set(["RUNNEL_JOB_KEY", "RUNNEL_WEBHOOK_SECRET", "RUNNEL_REDIS_URL", "RUNNEL_KAFKA_PROPERTIES"]);
    const extra = (container(work).env || []).filter((e) => e.valueFrom && e.valueFrom.secretKeyRef && !wiped.has(e.name));
    if (sc.compose) assert(extra.length > 0, "expected helper variables in compose mode");
    else eq(extra.map((e) => e.name), [], "secret helper variables in the worker");
  });

  check("security contexts", () => {
    for (const dep of [disp, work]) {
      const ps = dep.spec.template.spec;
      const c = container(dep);
      eq(ps.securityContext.runAsNonRoot, true, `${dep.metadata.name} runAsNonRoot`);
      eq(ps.securityContext.runAsUser, 10001, `${dep.metadata.name} runAsUser`);
      eq(ps.automountServiceAccountToken, false, `${dep.metadata.name} automountServiceAccountToken`);
      eq(c.securityContext.allowPrivilegeEscalation, false, `${dep.metadata.name} allowPrivilegeEscalation`);
      eq(c.securityContext.readOnlyRootFilesystem, true, `${dep.metadata.name} readOnlyRootFilesystem`);
      assert(c.securityContext.privileged !== true, `${dep.metadata.name} privileged`);
      eq(c.securityContext.capabilities.drop, ["ALL"], `${dep.metadata.name} capabilities.drop`);
      // Only a delegated cgroup makes the worker root, and then only of the
      // pod's own user namespace.
      if (dep === work && sc.delegate) {
        eq(c.securityContext.runAsUser, 0, "worker runAsUser with a delegated cgroup");
        eq(ps.hostUsers, false, "hostUsers with a delegated cgroup");
      } else {
        assert(c.securityContext.runAsUser === undefined, `${dep.metadata.name} container runAsUser`);
      }
      assert(!c.securityContext.capabilities.add, `${dep.metadata.name} adds capabilities`);
    }
    const wsc = container(work).securityContext;
    if ((sc.sandbox || "bwrap") === "bwrap") {
      eq(workerCm.data.RUNNEL_SANDBOX, "bwrap", "RUNNEL_SANDBOX");
      assert(["Unconfined", "Localhost"].includes(wsc.seccompProfile.type), `worker seccomp ${wsc.seccompProfile.type}`);
      assert(["Unconfined", "Localhost"].includes(wsc.appArmorProfile.type), `worker AppArmor ${wsc.appArmorProfile.type}`);
    } else {
      eq(workerCm.data.RUNNEL_SANDBOX, "process", "RUNNEL_SANDBOX");
      eq(wsc.seccompProfile.type, "RuntimeDefault", "process-mode seccomp");
    }
  });

  check("pod annotations: config checksum and scrape", () => {
    for (const dep of [disp, work]) {
      const a = dep.spec.template.metadata.annotations;
      assert(/^[0-9a-f]{64}$/.test(a["checksum/config"]), `${dep.metadata.name} checksum/config`);
      if (secrets.length) assert(/^[0-9a-f]{64}$/.test(a["checksum/secret"]), `${dep.metadata.name} checksum/secret`);
      eq(a["prometheus.io/scrape"], "true", `${dep.metadata.name} prometheus.io/scrape`);
      eq(a["prometheus.io/port"], String(container(dep).ports[0].containerPort), `${dep.metadata.name} prometheus.io/port`);
    }
  });

  check("selectors match pod labels", () => {
    for (const dep of [disp, work]) {
      assert(subset(dep.spec.selector.matchLabels, dep.spec.template.metadata.labels), `${dep.metadata.name} selector`);
    }
    for (const pdb of byKind(docs, "PodDisruptionBudget")) {
      assert([disp, work].some((d) => subset(pdb.spec.selector.matchLabels, d.spec.template.metadata.labels)),
        `PDB ${pdb.metadata.name} selects no pods`);
    }
    for (const svc of byKind(docs, "Service")) {
      assert([disp, work].some((d) => subset(svc.spec.selector, d.spec.template.metadata.labels)),
        `Service ${svc.metadata.name} selects no pods`);
    }
  });

  check(`autoscaler: ${sc.autoscaler}`, () => {
    const so = byKind(docs, "ScaledObject");
    const hpa = byKind(docs, "HorizontalPodAutoscaler");
    if (sc.autoscaler === "keda") {
      eq(so.length, 1, "ScaledObjects");
      eq(hpa.length, 0, "HPAs next to KEDA");
      const s = so[0].spec;
      eq(so[0].apiVersion, "keda.sh/v1alpha1", "ScaledObject apiVersion");
      eq(s.scaleTargetRef.name, work.metadata.name, "scaleTargetRef");
      const kafka = s.triggers.filter((x) => x.type === "kafka");
      eq(kafka.length, 1, "kafka triggers");
      const t = kafka[0];
      eq(t.metadata.bootstrapServers, workerCm.data.RUNNEL_KAFKA_BROKERS, "bootstrapServers");
      eq(t.metadata.consumerGroup, workerCm.data.RUNNEL_GROUP, "consumerGroup");
      eq(t.metadata.topic, workerCm.data.RUNNEL_JOBS_TOPIC, "topic");
      assert(/^[1-9][0-9]*$/.test(t.metadata.lagThreshold), `lagThreshold ${t.metadata.lagThreshold}`);
      eq(t.metadata.offsetResetPolicy, "earliest", "offsetResetPolicy");
      eq(t.metadata.allowIdleConsumers, "false", "allowIdleConsumers");
      assert(Number.isInteger(s.minReplicaCount) && s.maxReplicaCount >= s.minReplicaCount, "replica bounds");
      assert(!("replicas" in work.spec), "worker Deployment sets replicas while KEDA scales it");
      const sasl = workerCm.data.RUNNEL_KAFKA_PUBLIC_PROPERTIES !== undefined ||
        (container(work).env || []).some((e) => e.name === "RUNNEL_KAFKA_SASL_PASSWORD");
      const tas = byKind(docs, "TriggerAuthentication");
      if (sasl) {
        const ta = tas.filter((x) => x.metadata.name === t.authenticationRef.name);
        eq(ta.length, 1, "Kafka TriggerAuthentications");
        eq(ta[0].spec.secretTargetRef.map((r) => r.parameter).sort(), ["password", "username"], "auth parameters");
      }
      // The run-time queue's depth (KEDA's Redis scaler on a list length;
      // its cluster scaler on a Redis Cluster).
      const redis = s.triggers.filter((x) => x.type === "redis" || x.type === "redis-cluster");
      eq(redis.length, 1, "redis (queue depth) triggers");
      const rt = redis[0].metadata;
      eq(rt.listName, `${workerCm.data.RUNNEL_KEY_PREFIX}:{q}:depth`, "queue depth list");
      const addr = redis[0].type === "redis" ? rt.address : rt.addresses;
      assert(/^[^:/]+:[0-9]+$/.test(addr), `redis address ${addr}`);
      assert(/^[1-9][0-9]*$/.test(rt.listLength), `listLength ${rt.listLength}`);
      const redisAuth = (container(work).env || []).some((e) => e.name === "RUNNEL_REDIS_URL" || e.name === "RUNNEL_REDIS_PASSWORD");
      if (redisAuth) {
        const ta = tas.filter((x) => redis[0].authenticationRef && x.metadata.name === redis[0].authenticationRef.name);
        eq(ta.length, 1, "Redis TriggerAuthentication");
        eq(ta[0].spec.secretTargetRef.map((r) => r.parameter), ["password"], "redis auth parameters");
        if (secrets.length) {
          const k = ta[0].spec.secretTargetRef[0].key;
          assert(k in secrets[0].data, `the Secret lacks ${k} for KEDA`);
        }
      } else {
        assert(!redis[0].authenticationRef, "redis trigger auth without a Redis password");
      }
    } else if (sc.autoscaler === "hpa") {
      eq(so.length, 0, "ScaledObjects");
      eq(hpa.length, 1, "HPAs");
      eq(hpa[0].apiVersion, "autoscaling/v2", "HPA apiVersion");
      eq(hpa[0].spec.scaleTargetRef.name, work.metadata.name, "HPA target");
      eq(hpa[0].spec.metrics[0].resource.name, "cpu", "HPA metric");
      assert(!("replicas" in work.spec), "worker Deployment sets replicas while the HPA scales it");
    } else {
      eq(so.length + hpa.length, 0, "autoscalers");
      assert(Number.isInteger(work.spec.replicas), "worker replicas");
    }
  });

  const extra = {
    keda() {
      check("keda: SASL properties whole in the Secret", () => {
        const env = container(work).env;
        const props = env.find((e) => e.name === "RUNNEL_KAFKA_PROPERTIES");
        eq(props.valueFrom.secretKeyRef.key, "RUNNEL_KAFKA_PROPERTIES", "RUNNEL_KAFKA_PROPERTIES key");
        eq(Buffer.from(secrets[0].data.RUNNEL_KAFKA_PROPERTIES, "base64").toString(),
          "sasl.mechanisms=SCRAM-SHA-512;security.protocol=SASL_SSL;sasl.username=runnel-worker;sasl.password=s3cr3t-kafka-pw",
          "RUNNEL_KAFKA_PROPERTIES");
        assert(!("RUNNEL_KAFKA_PROPERTIES" in workerCm.data) && !("RUNNEL_KAFKA_PUBLIC_PROPERTIES" in workerCm.data), "properties left in the ConfigMap");
        const triggers = byKind(docs, "ScaledObject")[0].spec.triggers;
        eq(triggers[0].metadata.tls, "enable", "trigger tls");
        eq(triggers.map((x) => x.type), ["kafka", "redis", "prometheus"], "trigger types");
        eq(triggers[1].metadata.listLength, "4", "queue depth per worker");
        eq(triggers[1].metadata.listName, "runnel:{q}:depth", "queue depth key");
        eq(triggers[1].metadata.address, "redis.data.svc:6379", "queue depth address");
        eq(Buffer.from(secrets[0].data.RUNNEL_REDIS_PASSWORD, "base64").toString(), "k3da-p@ss:w/rd",
          "bare Redis password for KEDA, taken from the URL");
        eq(triggers[2].metadata.threshold, "8.00", "busy-slots threshold = slots x targetUtilization");
        eq(triggers[2].metadata.query, `sum(runnel_worker_slots_busy{namespace="runnel",pod=~"${work.metadata.name}-.*"})`, "busy-slots query");
      });
    },
    hpa() {
      check("hpa: plain properties in the ConfigMap", () => {
        eq(workerCm.data.RUNNEL_KAFKA_PROPERTIES, "client.id=runnel;fetch.max.bytes=1048576", "RUNNEL_KAFKA_PROPERTIES");
        eq(byKind(docs, "HorizontalPodAutoscaler")[0].spec.metrics[0].resource.target.averageUtilization, 60, "cpu target");
      });
    },
    fixed() {
      check("fixed: replicas and grace", () => {
        eq(work.spec.replicas, 5, "worker replicas");
        eq(work.spec.template.spec.terminationGracePeriodSeconds, 630, "grace = drain + margin");
        eq(workerCm.data.RUNNEL_RETENTION_SEC, "2592000", "RUNNEL_RETENTION_SEC");
        eq(workerCm.data.RUNNEL_MAX_RUNTIME_SEC, "604800", "RUNNEL_MAX_RUNTIME_SEC");
      });
    },
    secrets() {
      check("secrets: chart-created Secret holds each value", () => {
        eq(secrets.length, 1, "Secrets");
        const d = Object.fromEntries(Object.entries(secrets[0].data).map(([k, v]) => [k, Buffer.from(v, "base64").toString()]));
        eq(d.RUNNEL_JOB_KEY, SCENARIOS.secrets.secrets[0], "RUNNEL_JOB_KEY");
        eq(d.RUNNEL_API_TOKEN, "tok-9b7f2c1d-dispatcher", "RUNNEL_API_TOKEN");
        eq(d.RUNNEL_WEBHOOK_SECRET, "whsec-5b1c9e7a-webhooks", "RUNNEL_WEBHOOK_SECRET");
        eq(d.RUNNEL_REDIS_URL, "redis://:p@ss:w/rd-redis-31@redis.data.svc:6380/2", "RUNNEL_REDIS_URL");
        eq(d.RUNNEL_KAFKA_PROPERTIES,
          "sasl.mechanisms=PLAIN;security.protocol=SASL_SSL;sasl.username=kafka-user-77;sasl.password=kafka-pass-88;ssl.key.password=ssl-key-pass-99",
          "RUNNEL_KAFKA_PROPERTIES");
        eq(d.RUNNEL_KAFKA_SASL_PASSWORD, "kafka-pass-88", "RUNNEL_KAFKA_SASL_PASSWORD (for KEDA)");
        const env = Object.fromEntries(container(work).env.map((e) => [e.name, e]));
        eq(env.RUNNEL_REDIS_URL.valueFrom.secretKeyRef.key, "RUNNEL_REDIS_URL", "RUNNEL_REDIS_URL from the Secret");
        assert(!("RUNNEL_REDIS_URL" in workerCm.data), "plain RUNNEL_REDIS_URL left in the ConfigMap");
        eq(env.RUNNEL_KAFKA_PROPERTIES.valueFrom.secretKeyRef.key, "RUNNEL_KAFKA_PROPERTIES", "RUNNEL_KAFKA_PROPERTIES from the Secret");
        eq(workerCm.data.RUNNEL_REQUIRE_SEALED, "true", "RUNNEL_REQUIRE_SEALED");
        assert(!("RUNNEL_API_TOKEN" in env), "the worker does not need the API token");
        eq(env.RUNNEL_WEBHOOK_SECRET.valueFrom.secretKeyRef.key, "RUNNEL_WEBHOOK_SECRET", "RUNNEL_WEBHOOK_SECRET from the Secret");
        assert(!(container(disp).env || []).some((e) => e.name === "RUNNEL_WEBHOOK_SECRET"), "the dispatcher does not need the webhook secret");
        assert((container(disp).env || []).some((e) => e.name === "RUNNEL_API_TOKEN"), "dispatcher API token");
      });
    },
    "existing-secret"() {
      check("existing-secret: no Secret rendered, custom keys used", () => {
        eq(secrets.length, 0, "Secrets rendered");
        const keys = {};
        for (const dep of [disp, work]) {
          for (const e of container(dep).env || []) {
            if (e.valueFrom && e.valueFrom.secretKeyRef) keys[e.name] = e.valueFrom.secretKeyRef.key;
          }
        }
        eq(keys, {
          RUNNEL_JOB_KEY: "job-key",
          RUNNEL_API_TOKEN: "api-token",
          RUNNEL_REDIS_PASSWORD: "redis-password",
          RUNNEL_KAFKA_SASL_USERNAME: "kafka-username",
          RUNNEL_KAFKA_SASL_PASSWORD: "kafka-password",
          RUNNEL_KAFKA_SECRET_PROPERTIES: "kafka-secret-properties",
        }, "secret keys");
        for (const r of byKind(docs, "TriggerAuthentication")[0].spec.secretTargetRef) eq(r.name, "runnel-prod-secrets", "TriggerAuthentication secret");
        assert(!("checksum/secret" in work.spec.template.metadata.annotations), "checksum of a Secret the chart does not render");
      });
    },
    "existing-secret-whole"() {
      check("existing-secret-whole: whole values from the existing Secret", () => {
        eq(secrets.length, 0, "Secrets rendered");
        const keys = Object.fromEntries((container(work).env || []).map((e) => [e.name, e.valueFrom.secretKeyRef.key]));
        eq(keys, { RUNNEL_JOB_KEY: "job-key", RUNNEL_REDIS_URL: "redis-url", RUNNEL_KAFKA_PROPERTIES: "kafka-properties" }, "worker secret keys");
        assert(!("RUNNEL_KAFKA_PROPERTIES" in workerCm.data), "properties in the ConfigMap next to the Secret's");
        eq(byKind(docs, "TriggerAuthentication")[0].spec.secretTargetRef.map((r) => r.key), ["kafka-username", "kafka-password"], "KEDA keys");
      });
    },
    "redis-url-secret"() {
      check("redis-url-secret: URL from the Secret", () => {
        const e = container(work).env.find((x) => x.name === "RUNNEL_REDIS_URL");
        eq(e.valueFrom.secretKeyRef.key, "RUNNEL_REDIS_URL", "RUNNEL_REDIS_URL key");
        assert(!(container(work).env || []).some((x) => x.name === "RUNNEL_REDIS_PASSWORD"), "no separate password");
      });
    },
    "redis-cluster"() {
      check("redis-cluster: any node's URL from the Secret, to both programs", () => {
        const d = Object.fromEntries(Object.entries(secrets[0].data).map(([k, v]) => [k, Buffer.from(v, "base64").toString()]));
        eq(d.RUNNEL_REDIS_URL, "redis://:cl-pass-5150@redis-cluster.data.svc:6379/0", "RUNNEL_REDIS_URL in the Secret");
        for (const dep of [disp, work]) {
          const e = (container(dep).env || []).find((x) => x.name === "RUNNEL_REDIS_URL");
          assert(e && e.valueFrom && e.valueFrom.secretKeyRef.key === "RUNNEL_REDIS_URL", `${dep.metadata.name}: RUNNEL_REDIS_URL from the Secret`);
        }
      });
      check("redis-cluster: acknowledged output for the worker only", () => {
        eq(workerCm.data.RUNNEL_REDIS_WAIT_REPLICAS, "1", "worker RUNNEL_REDIS_WAIT_REPLICAS");
        eq(workerCm.data.RUNNEL_REDIS_WAIT_TIMEOUT_MS, "500", "worker RUNNEL_REDIS_WAIT_TIMEOUT_MS");
        const dispCm = byKind(docs, "ConfigMap").find((c) => c.metadata.name === container(disp).envFrom[0].configMapRef.name);
        assert(!("RUNNEL_REDIS_WAIT_REPLICAS" in dispCm.data), "the dispatcher has no such flag");
      });
      check("redis-cluster: KEDA's queue trigger is the redis-cluster scaler", () => {
        const t = byKind(docs, "ScaledObject")[0].spec.triggers.find((x) => x.type.startsWith("redis"));
        eq(t.type, "redis-cluster", "trigger type");
        eq(t.metadata.addresses, "redis-cluster.data.svc:6379", "addresses");
        eq(t.metadata.listName, "runnel:{q}:depth", "listName");
        assert(!("databaseIndex" in t.metadata) && !("address" in t.metadata), "no standalone-only fields");
        eq(t.authenticationRef.name, "rt-runnel-worker-redis", "TriggerAuthentication");
      });
    },
    ingress() {
      check("ingress: routes to the dispatcher Service", () => {
        const ing = byKind(docs, "Ingress");
        eq(ing.length, 1, "Ingresses");
        const svc = component(docs, "Service", "dispatcher");
        const b = ing[0].spec.rules[0].http.paths[0].backend.service;
        eq(b.name, svc.metadata.name, "backend service");
        eq(b.port.number, svc.spec.ports[0].port, "backend port");
        eq(ing[0].spec.rules[0].host, "runnel.test.internal", "host");
        eq(ing[0].spec.ingressClassName, "nginx", "ingressClassName");
      });
    },
    networkpolicy() {
      check("networkpolicy: worker egress and dispatcher ingress", () => {
        const wnp = component(docs, "NetworkPolicy", "worker");
        const dnp = component(docs, "NetworkPolicy", "dispatcher");
        eq(wnp.spec.policyTypes, ["Ingress", "Egress"], "worker policyTypes");
        const ports = wnp.spec.egress.map((r) => r.ports.map((p) => `${p.protocol}/${p.port}`).join(","));
        eq(ports, ["UDP/53,TCP/53", "TCP/9092,TCP/9093", "TCP/6379", "TCP/443"], "worker egress ports");
        for (const r of wnp.spec.egress) assert(r.to && r.to.length, "an egress rule without peers allows everything");
        eq(wnp.spec.egress[3].to.map((t) => t.ipBlock.cidr), ["203.0.113.0/24", "198.51.100.0/24"], "workspace CIDRs");
        eq(dnp.spec.policyTypes, ["Ingress"], "dispatcher policyTypes");
        eq(dnp.spec.ingress[0].from[0].namespaceSelector.matchLabels["kubernetes.io/metadata.name"], "backend", "dispatcher ingress peer");
      });
    },
    servicemonitor() {
      check("servicemonitor: both components scraped", () => {
        const sms = byKind(docs, "ServiceMonitor");
        eq(sms.length, 2, "ServiceMonitors");
        for (const sm of sms) {
          eq(sm.metadata.labels.release, "prometheus", "selection label");
          const svc = byKind(docs, "Service").find((s) => subset(sm.spec.selector.matchLabels, s.metadata.labels));
          assert(svc, `ServiceMonitor ${sm.metadata.name} selects no Service`);
          assert(svc.spec.ports.some((p) => p.name === sm.spec.endpoints[0].port), `${sm.metadata.name} port`);
        }
      });
    },
    limits() {
      check("limits: the worker's limits, cgroup and egress in its ConfigMap", () => {
        const d = workerCm.data;
        eq([d.RUNNEL_RUN_MEMORY_MB, d.RUNNEL_RUN_PIDS, d.RUNNEL_RUN_CPUS, d.RUNNEL_RUN_DISK_MB, d.RUNNEL_RUN_TMP_MB, d.RUNNEL_RUN_OUTPUT_MB],
          ["1024", "256", "0.5", "2048", "128", "8"], "limits");
        eq(d.RUNNEL_CGROUP, "v2", "RUNNEL_CGROUP");
        eq(d.RUNNEL_EGRESS, "allowlist", "RUNNEL_EGRESS");
        eq(d.RUNNEL_EGRESS_ALLOW, "@model,@workspace_api,*.pypi.org", "RUNNEL_EGRESS_ALLOW");
        eq(work.spec.template.metadata.annotations["io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw"], "true",
          "CRI-O writable cgroup annotation");
      });
    },
    defaults() {
      check("defaults: a generated API token in a chart-made Secret", () => {
        eq(secrets.length, 1, "Secrets");
        const tok = Buffer.from(secrets[0].data.RUNNEL_API_TOKEN || "", "base64").toString();
        assert(/^[A-Za-z0-9]{48}$/.test(tok), `generated token: ${tok.length} characters`);
        const env = (container(disp).env || []).find((e) => e.name === "RUNNEL_API_TOKEN");
        assert(env && env.valueFrom.secretKeyRef.name === secrets[0].metadata.name, "the dispatcher reads it");
        const dcm = cmByName.get(container(disp).envFrom[0].configMapRef.name);
        assert(!("RUNNEL_INSECURE_NO_AUTH" in dcm.data), "open by default");
        eq([dcm.data.RUNNEL_HEAD_TIMEOUT_MS, dcm.data.RUNNEL_MAX_CONNECTIONS], ["10000", "4096"], "head deadline and cap");
        eq(workerCm.data.RUNNEL_RUN_OUTPUT_MB, "64", "RUNNEL_RUN_OUTPUT_MB");
      });
      check("defaults: NetworkPolicies on, workers kept off private and metadata addresses", () => {
        const wnp = component(docs, "NetworkPolicy", "worker");
        component(docs, "NetworkPolicy", "dispatcher");
        for (const r of wnp.spec.egress) assert(r.to && r.to.length, "an egress rule without peers allows everything");
        const inet = wnp.spec.egress.find((r) => r.to.some((t) => t.ipBlock && t.ipBlock.cidr === "0.0.0.0/0"));
        assert(inet, "no internet rule");
        eq(inet.ports.map((p) => `${p.protocol}/${p.port}`), ["TCP/443"], "internet ports");
        const except = inet.to[0].ipBlock.except;
        for (const c of ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"])
          assert(except.includes(c), `the internet rule reaches ${c}`);
      });
      check("defaults: a second render keeps no token outside the Secret", () => {
        const r = helmRun(["install", "rt", chart, "--dry-run=client", "--namespace", "runnel"]);
        assert(r.status === 0, r.stderr);
        assert(r.stdout.includes("get secret"), "NOTES say where the token is");
      });
    },
    "no-auth"() {
      check("no-auth: open on purpose, and said so", () => {
        const dcm = cmByName.get(container(disp).envFrom[0].configMapRef.name);
        eq(dcm.data.RUNNEL_INSECURE_NO_AUTH, "true", "RUNNEL_INSECURE_NO_AUTH");
        assert(!(container(disp).env || []).some((e) => e.name === "RUNNEL_API_TOKEN"), "a token without auth");
        eq(byKind(docs, "NetworkPolicy").length, 0, "NetworkPolicies turned off");
      });
    },
    "process-ack"() {
      check("process-ack: NOTES warn loudly", () => {
        const r = helmRun(["install", "rt", chart, "--dry-run=client", "--namespace", "runnel", ...valuesArgs(name)]);
        assert(r.status === 0, r.stderr);
        assert(r.stdout.includes("AGENTS RUN WITH NO ISOLATION"), "NOTES lack the process-mode warning");
        assert(!("hostUsers" in work.spec.template.spec), "hostUsers set for the process sandbox");
      });
    },
  };
  if (extra[name]) extra[name]();
}

function lint() {
  const sets = ["defaults", ...Object.keys(SCENARIOS).filter((s) => s !== "defaults")];
  for (const s of sets) {
    check(`helm lint --strict ${s}`, () => {
      const r = helmRun(["lint", "--strict", chart, ...valuesArgs(s)]);
      assert(r.status === 0, r.stdout + r.stderr);
      assert(!/\[(WARNING|ERROR)\]/.test(r.stdout), r.stdout);
    });
  }
  check("every values file is a scenario or a refusal", () => {
    for (const f of fs.readdirSync(valuesDir)) {
      const n = f.replace(/\.yaml$/, "");
      assert(n in SCENARIOS || n in REFUSALS, `${f} is not used`);
    }
  });
}

function refuse(name) {
  const want = REFUSALS[name];
  assert(want, `unknown refusal ${name}`);
  check(`refuse ${name}`, () => {
    const r = helmRun(["template", "rt", chart, ...valuesArgs(name)]);
    assert(r.status !== 0, "rendered although it must be refused");
    assert(r.stderr.includes(want), `stderr lacks "${want}": ${r.stderr}`);
  });
}

// Every RUNNEL_* variable the chart gives a program is one of its flags'
// environment twins (as its --help lists them), except the intermediate
// variables that only feed a $(NAME) reference.
function flags(workerBin, dispatcherBin) {
  for (const b of [workerBin, dispatcherBin]) {
    if (!b || !fs.existsSync(b)) {
      console.log(`skipped: ${b || "a program"} is not built`);
      process.exit(77);
    }
  }
  const helpOf = (bin) => {
    const r = spawnSync(bin, ["--help"], { encoding: "utf8", timeout: 10000 });
    return new Set(`${r.stdout}${r.stderr}`.match(/RUNNEL_[A-Z_]+/g) || []);
  };
  const known = { worker: helpOf(workerBin), dispatcher: helpOf(dispatcherBin) };
  for (const scenario of ["secrets", "keda", "fixed", "defaults", "no-auth", "redis-cluster"]) {
    const r = helmRun(["template", "rt", chart, ...valuesArgs(scenario)]);
    assert(r.status === 0, r.stderr);
    const docs = yaml.loadAll(r.stdout).filter(Boolean);
    const cms = new Map(byKind(docs, "ConfigMap").map((c) => [c.metadata.name, c]));
    for (const comp of ["worker", "dispatcher"]) {
      check(`${scenario}: ${comp} reads every variable the chart sets`, () => {
        const c = container(component(docs, "Deployment", comp));
        const names = new Set();
        for (const ef of c.envFrom || []) for (const k of Object.keys(cms.get(ef.configMapRef.name).data)) names.add(k);
        const refs = new Set();
        for (const e of c.env || []) {
          names.add(e.name);
          for (const m of String(e.value || "").matchAll(/\$\(([A-Z_]+)\)/g)) refs.add(m[1]);
        }
        for (const n of names) {
          if (known[comp].has(n)) continue;
          assert(refs.has(n), `${comp}: ${n} is neither a flag of the program nor used by a $(${n}) reference`);
        }
      });
    }
  }
}

const [mode, name, arg2] = process.argv.slice(2);
try {
  if (mode === "lint") lint();
  else if (mode === "flags") flags(name, arg2);
  else if (mode === "render") await render(name);
  else if (mode === "refuse") refuse(name);
  else throw new Error("usage: chart-test.mjs lint | render SCENARIO | refuse CASE | flags WORKER DISPATCHER");
} catch (e) {
  failed++;
  console.log(`FAIL ${mode} ${name || ""}: ${e.message}`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
