//! Environment parity end to end: requirements met by an image's tags, and a machine whose
//! driver contradicts its pool's promise cordoned, reported and replaced. The harness plays
//! GPU feature discovery: a machine booted from an image gets the labels of the driver that
//! image really installs.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use spillway_api::ComputePool;
use spillway_api::job::JobPhase;
use spillway_tests::machines::gfd_labels;
use spillway_tests::moto::tagged_image;
use spillway_tests::operator::{eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

/// The cloud pool's status, once `check` holds of it.
async fn pool_status(w: &World, what: &str, check: impl Fn(&serde_json::Value) -> bool) {
    let pools: Api<ComputePool> = Api::all(w.client.clone());
    eventually(WAIT, what, || async {
        let p = pools.get(&w.aws_pool).await.map_err(|e| e.to_string())?;
        let st = serde_json::to_value(p.status.unwrap_or_default()).unwrap_or_default();
        if check(&st) {
            Ok(())
        } else {
            Err(st.to_string())
        }
    })
    .await;
}

fn condition<'a>(st: &'a serde_json::Value, type_: &str) -> Option<&'a serde_json::Value> {
    st["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_needing_cuda_12_4_passes_over_an_older_private_node_and_bursts_to_an_image_that_has_it()
 {
    let _turn = serial().await;
    let w = World::new("aws-env", json!({})).await;
    // The private node (free) has driver 535 with CUDA 12.2.
    let labels: serde_json::Map<String, serde_json::Value> = gfd_labels("535.104.05", "12.2")
        .into_iter()
        .map(|(k, v)| (k, json!(v)))
        .collect();
    Api::<Node>::all(w.client.clone())
        .patch(
            &format!("{}-private-0", w.ns),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .expect("label the private node");
    // The pool states nothing of its environment: its image's tags do.
    let image = tagged_image(
        &w.ec2,
        &format!("{}-cuda124", w.ns),
        &[
            ("spillway.io/nvidia-driver-version", "550.54.15"),
            ("spillway.io/cuda-version", "12.4"),
        ],
    )
    .await
    .expect("an image");
    w.patch_aws_pool(json!({"amiId": image})).await;
    let _machines = w.boot_machines_from(
        Some(Duration::from_secs(1)),
        HashMap::from([(image.clone(), gfd_labels("550.54.15", "12.4"))]),
    );
    let _op = w.operator().await;

    w.submit(
        "cuda124",
        json!({"requirements": {"minCudaVersion": "12.4"}}),
        Some(3),
    )
    .await;
    let job = w.wait_phase("cuda124", JobPhase::Running).await;
    let st = job.status.unwrap_or_default();
    assert_eq!(
        st.environment,
        Some(spillway_api::Environment::Cloud),
        "{st:?}"
    );
    assert_eq!(st.pool.as_deref(), Some(w.aws_pool.as_str()));
    // The pool shows what its node states now, and how it differs from the private side.
    pool_status(&w, "the joined node's environment and drift", |st| {
        st["environment"]["source"] == "nodes"
            && st["environment"]["driverVersions"] == json!(["550.54.15"])
            && condition(st, "EnvironmentDrift").is_some_and(|c| {
                c["status"] == "True"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("CUDA 12.4 here, 12.2 on private nodes"))
            })
    })
    .await;
    // A job with no requirements still runs privately.
    w.submit("plain", json!({}), None).await;
    let plain = w.wait_phase("plain", JobPhase::Running).await;
    assert_eq!(
        plain.status.unwrap_or_default().environment,
        Some(spillway_api::Environment::Private)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_short_of_its_pools_promise_is_cordoned_reported_and_replaced() {
    let _turn = serial().await;
    let w = World::new("aws-mismatch", json!({})).await;
    // The pool promises driver 550 and CUDA 12.4, but its image really has 535 and 12.2.
    let stale = tagged_image(&w.ec2, &format!("{}-stale", w.ns), &[])
        .await
        .expect("an image");
    let fixed = tagged_image(&w.ec2, &format!("{}-fixed", w.ns), &[])
        .await
        .expect("an image");
    w.patch_aws_pool(json!({
        "amiId": stale, "instanceTypes": ["g6.xlarge"],
        "environment": {"driverVersion": "550.54.15", "cudaVersion": "12.4"},
    }))
    .await;
    let machines = w.boot_machines_from(
        Some(Duration::from_secs(1)),
        HashMap::from([
            (stale.clone(), gfd_labels("535.104.05", "12.2")),
            (fixed.clone(), gfd_labels("550.54.15", "12.4")),
        ]),
    );
    let _op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("train", json!({}), Some(3)).await;

    w.wait_warning(
        "EnvironmentMismatch",
        "with driver 535.104.05 where 550.54.15 was promised; CUDA 12.2 where 12.4 was promised",
    )
    .await;
    let first = eventually(WAIT, "the first instance terminated", || async {
        let list = w.instances().await;
        match list.as_slice() {
            [(id, _, state, _)] if state == "terminated" || state == "shutting-down" => {
                Ok(id.clone())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Its node was cordoned before it went (unless it is gone already).
    if let Ok(n) = Api::<Node>::all(w.client.clone()).get(&first).await {
        assert_eq!(n.spec.and_then(|s| s.unschedulable), Some(true), "cordoned");
    }
    pool_status(&w, "LaunchHealthy False (EnvironmentMismatch)", |st| {
        condition(st, "LaunchHealthy")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "EnvironmentMismatch")
    })
    .await;
    let job = w.jobs().get("train").await.expect("job");
    assert_ne!(
        job.status.unwrap_or_default().phase,
        Some(JobPhase::Running),
        "nothing ran on the machine"
    );

    // The platform team fixes the image: the pool changes, the offering is trusted again, and
    // the job is launched again, on a machine that has what was promised.
    w.patch_aws_pool(json!({"amiId": fixed})).await;
    let job = w.wait_phase("train", JobPhase::Running).await;
    let st = job.status.unwrap_or_default();
    assert_eq!(st.environment, Some(spillway_api::Environment::Cloud));
    let node = st.nodes.first().cloned().unwrap_or_default();
    assert_ne!(node, first, "a new machine");
    let instances = w.instances().await;
    assert_eq!(instances.len(), 2, "one replacement: {instances:?}");
    drop(machines);
}
