//! The `spillway.io/<field>` annotations that carry, on a workload, what a GpuJob's spec says.
//! Each names the GpuJob field it sets; a value that cannot be read is refused with the
//! annotation's name (docs/workloads.md lists them).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as KubeTime;
use spillway_api::GpuJobSpec;
use spillway_core as core;

/// The annotations read, in the order docs/workloads.md lists them.
pub const FIELDS: [&str; 12] = [
    "priority",
    "estimatedRuntime",
    "maxRuntime",
    "deadline",
    "restartable",
    "checkpointInterval",
    "datasets",
    "gpuModels",
    "placement",
    "maxHourlyCost",
    "requirements",
    "topology",
];

/// Sets the fields of `spec` the workload's annotations carry.
pub fn apply(
    annotations: Option<&BTreeMap<String, String>>,
    spec: &mut GpuJobSpec,
) -> Result<(), String> {
    let Some(annotations) = annotations else {
        return Ok(());
    };
    for field in FIELDS {
        let key = format!("spillway.io/{field}");
        let Some(raw) = annotations.get(&key) else {
            continue;
        };
        let value = raw.trim();
        let bad = |why: String| format!("annotation {key}: {why} (got {raw:?})");
        match field {
            "priority" => {
                spec.priority = value
                    .parse()
                    .map_err(|_| bad("must be a whole number".into()))?;
            }
            "estimatedRuntime" | "maxRuntime" | "checkpointInterval" => {
                core::Duration::parse(value)
                    .map_err(|e| bad(format!("must be a duration such as 90m or 4h: {e}")))?;
                let v = Some(value.to_string());
                match field {
                    "estimatedRuntime" => spec.estimated_runtime = v,
                    "maxRuntime" => spec.max_runtime = v,
                    _ => spec.checkpoint_interval = v,
                }
            }
            "deadline" => {
                let t: KubeTime = serde_json::from_value(serde_json::Value::String(value.into()))
                    .map_err(|_| {
                    bad("must be an RFC 3339 time such as 2026-12-24T18:00:00Z".into())
                })?;
                spec.deadline = Some(t);
            }
            "restartable" => {
                spec.restartable = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("must be \"true\" or \"false\"".into())),
                };
            }
            "datasets" | "gpuModels" => {
                let list: Vec<String> = value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                if field == "datasets" {
                    spec.datasets = list;
                } else {
                    spec.gpu_models = list;
                }
            }
            "placement" => {
                spec.placement = serde_json::from_value(serde_json::Value::String(value.into()))
                    .map_err(|_| bad("must be Auto, PrivateOnly or CloudOnly".into()))?;
            }
            "maxHourlyCost" => {
                let v: f64 = value
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| bad("must be a number of USD per hour, 0 or more".into()))?;
                spec.max_hourly_cost = Some(v);
            }
            "requirements" => {
                spec.requirements = Some(serde_json::from_str(value).map_err(|e| {
                    bad(format!(
                        "must be a JSON object of a GpuJob's spec.requirements: {e}"
                    ))
                })?);
            }
            "topology" => {
                spec.topology = Some(serde_json::from_str(value).map_err(|e| {
                    bad(format!(
                        "must be a JSON object of a GpuJob's spec.topology: {e}"
                    ))
                })?);
            }
            _ => {}
        }
    }
    Ok(())
}
