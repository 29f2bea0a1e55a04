// Validates rendered Kubernetes objects offline against the API schemas.
//
// Two passes per object, both driven by the published models of the API
// (kubernetes-models for the built-in kinds, @kubernetes-models/keda and
// @kubernetes-models/prometheus-operator for the KEDA and Prometheus
// Operator CRDs):
//   1. the model's JSON-schema validator (compiled from the OpenAPI schema
//      with ajv): types, required fields, enums, formats;
//   2. a strict pass that refuses any field the schema does not declare,
//      as `kubectl apply --validate=strict` would. The generated schemas
//      leave additionalProperties open, so this pass walks the object
//      against the models' generated type declarations (one property per
//      schema property) with the TypeScript checker.
// An object whose apiVersion/kind has no schema is an error, not a skip.

import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import fs from "node:fs";
import path from "node:path";

// The npm packages live in the build tree, never in the source tree:
// RUNNEL_CHART_NODE_MODULES names that node_modules directory.
const NODE_MODULES = process.env.RUNNEL_CHART_NODE_MODULES;
if (!NODE_MODULES || !fs.existsSync(path.join(NODE_MODULES, "kubernetes-models"))) {
  throw new Error("RUNNEL_CHART_NODE_MODULES must name the node_modules that tests/charts/tools.sh installed");
}
export const requireTool = createRequire(path.join(NODE_MODULES, "noop.js"));
const ts = requireTool("typescript");

// apiVersion group -> package that models it.
const PACKAGES = {
  "keda.sh": "@kubernetes-models/keda",
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
};

// The packages lay out one module per kind: <package>/<apiVersion>/<Kind>.js
// next to its <Kind>.d.ts.
function resolveModel(apiVersion, kind) {
  if (!/^[A-Za-z0-9.-]*\/?[A-Za-z0-9]+$/.test(apiVersion) || !/^[A-Za-z0-9]+$/.test(kind)) return null;
  const slash = apiVersion.indexOf("/");
  const group = slash < 0 ? "" : apiVersion.slice(0, slash);
  const pkg = PACKAGES[group] || "kubernetes-models";
  const js = path.join(NODE_MODULES, pkg, apiVersion, `${kind}.js`);
  const dts = path.join(NODE_MODULES, pkg, apiVersion, `${kind}.d.ts`);
  if (!fs.existsSync(js) || !fs.existsSync(dts)) return null;
  return { url: pathToFileURL(js).href, dts };
}

export async function createValidator() {
  const models = new Map(); // "apiVersion/kind" -> { Model, dts } | null
  const checkers = new Map(); // dts -> { checker, type }

  async function model(apiVersion, kind) {
    const key = `${apiVersion}|${kind}`;
    if (!models.has(key)) {
      const where = resolveModel(apiVersion, kind);
      let entry = null;
      if (where) {
        const mod = await import(where.url);
        if (typeof mod[kind] === "function") entry = { Model: mod[kind], dts: where.dts };
      }
      models.set(key, entry);
    }
    return models.get(key);
  }

  // One TypeScript program holds the declaration files of every kind in the
  // batch (prepare() lists them up front: building a program is the slow
  // part); the checker resolves the imports between the models' .d.ts files.
  let checker = null;
  const types = new Map(); // dts -> declared type of I<Kind>
  async function prepare(docs) {
    const wanted = new Map();
    for (const d of docs) {
      if (!d || typeof d.apiVersion !== "string" || typeof d.kind !== "string") continue;
      const m = await model(d.apiVersion, d.kind);
      if (m && !types.has(m.dts)) wanted.set(m.dts, d.kind);
    }
    if (wanted.size === 0) return;
    for (const dts of types.keys()) wanted.set(dts, null);
    const program = ts.createProgram([...wanted.keys()], {
      noEmit: true,
      target: ts.ScriptTarget.ES2022,
      lib: ["lib.es5.d.ts"],
      module: ts.ModuleKind.ESNext,
      moduleResolution: ts.ModuleResolutionKind.Bundler,
      types: [],
      skipLibCheck: true,
    });
    checker = program.getTypeChecker();
    const kinds = new Map([...types.keys()].map((dts) => [dts, types.get(dts).kind]));
    types.clear();
    for (const [dts, k] of wanted) {
      const kind = k || kinds.get(dts);
      const sf = program.getSourceFile(dts);
      const fileSym = sf && checker.getSymbolAtLocation(sf);
      const sym = fileSym && checker.getExportsOfModule(fileSym).find((s) => s.getName() === `I${kind}`);
      if (!sym) throw new Error(`${dts}: no interface I${kind}`);
      types.set(dts, { kind, type: checker.getDeclaredTypeOfSymbol(sym) });
    }
  }

  function strictWalk(checker, value, type, where, errors) {
    if (value === null || value === undefined) return;
    if (type.flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown)) return;
    const members = (type.isUnion() ? type.types : [type]).filter(
      (t) => !(t.flags & (ts.TypeFlags.Undefined | ts.TypeFlags.Null)),
    );
    if (members.some((t) => t.flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown))) return;
    if (Array.isArray(value)) {
      const arr = members.find((t) => checker.isArrayType(t));
      if (!arr) return; // a type mismatch; the schema pass reports it
      const elem = checker.getTypeArguments(arr)[0];
      value.forEach((v, i) => strictWalk(checker, v, elem, `${where}/${i}`, errors));
      return;
    }
    if (typeof value !== "object") return;
    const objs = members.filter((t) => t.flags & ts.TypeFlags.Object && !checker.isArrayType(t));
    if (objs.length === 0) return;
    const index = objs.map((t) => checker.getIndexInfoOfType(t, ts.IndexKind.String)).find(Boolean);
    for (const [k, v] of Object.entries(value)) {
      let prop = null;
      for (const t of objs) {
        prop = checker.getPropertyOfType(t, k);
        if (prop) break;
      }
      if (prop) {
        strictWalk(checker, v, checker.getTypeOfSymbol(prop), `${where}/${k}`, errors);
      } else if (index) {
        strictWalk(checker, v, index.type, `${where}/${k}`, errors);
      } else {
        errors.push(`${where}/${k}: unknown field "${k}"`);
      }
    }
  }

  // Returns a list of messages; empty when the object is valid.
  async function validate(obj) {
    if (!obj || typeof obj !== "object" || Array.isArray(obj)) return ["not an object"];
    const { apiVersion, kind } = obj;
    if (typeof apiVersion !== "string" || typeof kind !== "string") return ["missing apiVersion or kind"];
    const m = await model(apiVersion, kind);
    if (!m) return [`no schema for ${apiVersion} ${kind}`];
    const errors = [];
    try {
      new m.Model(obj).validate();
    } catch (e) {
      for (const line of String(e.message).split(/, (?=data\/)/)) errors.push(`schema: ${line}`);
    }
    if (!types.has(m.dts)) await prepare([obj]);
    strictWalk(checker, obj, types.get(m.dts).type, "", errors);
    return errors;
  }

  return { prepare, validate };
}

// CLI: node validate.mjs FILE.yaml... validates every document in each file.
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const yaml = requireTool("js-yaml");
  const v = await createValidator();
  const files = process.argv.slice(2).map((f) => [f, yaml.loadAll(fs.readFileSync(f, "utf8")).filter(Boolean)]);
  await v.prepare(files.flatMap(([, docs]) => docs));
  let bad = 0;
  for (const [file, docs] of files) {
    for (const doc of docs) {
      const errs = await v.validate(doc);
      const name = `${doc.kind}/${doc.metadata && doc.metadata.name}`;
      if (errs.length) {
        bad++;
        for (const e of errs) console.log(`${file}: ${name}: ${e}`);
      } else {
        console.log(`${file}: ${name}: ok`);
      }
    }
  }
  process.exit(bad ? 1 : 0);
}
