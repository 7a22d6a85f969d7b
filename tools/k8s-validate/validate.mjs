// Validates Kubernetes manifests (JSON files, one object each) against the official schemas,
// through the kubernetes-models package (generated from Kubernetes' OpenAPI definitions).
// Usage: node validate.mjs FILE...   Exit 0 only when every file is a valid object of its kind.
import { readFileSync } from "node:fs";
import { Job } from "kubernetes-models/batch/v1";
import { Pod, Node } from "kubernetes-models/v1";
import {
  DeviceClass,
  ResourceClaim,
  ResourceClaimTemplate,
  ResourceSlice,
} from "kubernetes-models/resource.k8s.io/v1";

const kinds = {
  "batch/v1/Job": Job,
  "v1/Pod": Pod,
  "v1/Node": Node,
  "resource.k8s.io/v1/ResourceClaim": ResourceClaim,
  "resource.k8s.io/v1/ResourceClaimTemplate": ResourceClaimTemplate,
  "resource.k8s.io/v1/ResourceSlice": ResourceSlice,
  "resource.k8s.io/v1/DeviceClass": DeviceClass,
};
let failed = 0;
for (const file of process.argv.slice(2)) {
  let obj;
  try {
    obj = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    console.log(`FAIL ${file}: not JSON: ${e.message}`);
    failed++;
    continue;
  }
  const Kind = kinds[`${obj.apiVersion}/${obj.kind}`];
  if (!Kind) {
    console.log(`FAIL ${file}: no schema for ${obj.apiVersion} ${obj.kind}`);
    failed++;
    continue;
  }
  try {
    new Kind(obj).validate();
    console.log(`ok   ${file}`);
  } catch (e) {
    console.log(`FAIL ${file}: ${e.message}`);
    failed++;
  }
}
if (process.argv.length <= 2) {
  console.log("usage: node validate.mjs FILE...");
  process.exit(2);
}
process.exit(failed ? 1 : 0);
