//! GpuJobs as the end-to-end tests submit and watch them: one GPU per replica, a container the
//! fake kubelet runs, and an optional run time after which its pods succeed.

use std::time::Duration;

use kube::api::{Api, PostParams};
use serde_json::json;
use spillway_api::GpuJob;
use spillway_api::job::JobPhase;

use crate::kubelet::RUN_SECONDS;
use crate::operator::eventually;

/// How long the tests wait for a job to reach a phase.
pub const WAIT: Duration = Duration::from_secs(60);

/// Submits `namespace/name` to `queue`: one replica of one GPU, `extra` merged into the spec;
/// with `run_seconds` its pods succeed after that long, else they run until deleted.
pub async fn submit(
    jobs: &Api<GpuJob>,
    name: &str,
    queue: &str,
    extra: serde_json::Value,
    run_seconds: Option<u32>,
) {
    let mut annotations = serde_json::Map::new();
    if let Some(s) = run_seconds {
        annotations.insert(RUN_SECONDS.into(), json!(s.to_string()));
    }
    let mut spec = json!({
        "queue": queue,
        "gpusPerReplica": 1,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "train", "image": "pytorch:2"}]},
        },
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        spec[k] = v;
    }
    let job: GpuJob = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("job JSON");
    jobs.create(&PostParams::default(), &job)
        .await
        .unwrap_or_else(|e| panic!("create GpuJob {name}: {e}"));
}

/// Waits until the job has `phase`; returns it.
pub async fn wait_phase(jobs: &Api<GpuJob>, name: &str, phase: JobPhase) -> GpuJob {
    eventually(WAIT, &format!("job {name} to be {phase:?}"), || async {
        let j = jobs.get(name).await.map_err(|e| e.to_string())?;
        if j.status.as_ref().and_then(|s| s.phase) == Some(phase) {
            Ok(j)
        } else {
            Err(format!("{:?}", j.status))
        }
    })
    .await
}
