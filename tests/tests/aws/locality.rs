//! Data locality through the running system: Restricted data never causes a launch;
//! Confidential data bursts only where a BurstPolicy allows it; between two offerings of equal
//! price, the region holding a copy of the job's data wins because of egress; the decision
//! carries the egress estimate and the job's cost includes it.

use std::time::Duration;

use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuQueue};
use spillway_tests::operator::{RunningOperator, eventually, serial, test_settings};
use spillway_tests::workload::WAIT;

use crate::world::{World, create};

/// g6.xlarge at the same price in two regions.
const CATALOG: &str = "\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone
g6.xlarge,L4,1,4,16,0.8048,,us-east-1,use1-az1
g6.xlarge,L4,1,4,16,0.8048,,us-west-2,usw2-az1
";

async fn decision_of(w: &World, job: &str) -> spillway_api::job::DecisionStatus {
    Api::<GpuJob>::namespaced(w.client.clone(), &w.ns)
        .get(job)
        .await
        .ok()
        .and_then(|j| j.status)
        .and_then(|s| s.decision)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_decides_where_and_whether_a_job_bursts() {
    let _turn = serial().await;
    let w = World::new("aws-locality", json!({"maxWait": "1s"})).await;
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let (east, west) = (w.aws_pool.clone(), format!("{}-west", w.ns));
    create(
        Api::<ComputePool>::all(w.client.clone()),
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
               "metadata": {"name": west},
               "spec": {"aws": {"region": "us-west-2", "amiId": w.ami,
                                "instanceTypes": ["g6.xlarge"], "capacityTypes": ["on-demand"]},
                        "idleTimeout": "10m"}}),
    )
    .await;
    Api::<GpuQueue>::all(w.client.clone())
        .patch(
            &w.queue,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"burst": {"pools": [east, west]}}})),
        )
        .await
        .expect("both pools");
    let data = |name: &str, class: &str, locations: serde_json::Value, gib: f64| {
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "Dataset",
               "metadata": {"name": format!("{}-{name}", w.ns)},
               "spec": {"classification": class, "locations": locations,
                        "sizeGiB": gib, "egressUSDPerGiB": 0.1}})
    };
    let datasets = Api::<Dataset>::all(w.client.clone());
    for d in [
        data(
            "west",
            "Public",
            json!([{"environment": "aws", "region": "us-west-2"}]),
            100.0,
        ),
        data(
            "home",
            "Internal",
            json!([{"environment": "private"}]),
            50.0,
        ),
        data(
            "secret",
            "Confidential",
            json!([{"environment": "private"}]),
            10.0,
        ),
        data(
            "patients",
            "Restricted",
            json!([{"environment": "private"}]),
            10.0,
        ),
    ] {
        create(datasets.clone(), d).await;
    }
    // Confidential data may go to us-west-2 only, and only for this test's queue.
    let policy = format!("{}-confidential-west", w.ns);
    create(
        Api::<BurstPolicy>::all(w.client.clone()),
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "BurstPolicy",
               "metadata": {"name": policy},
               "spec": {"rules": [{"name": "west-only",
                                   "when": format!("queue.name == '{}' && job.datasets.exists(d, d.classification == 'Confidential')", w.queue),
                                   "allowClassifications": ["Confidential"],
                                   "regions": ["us-west-2"]}]}}),
    )
    .await;
    let mut cloud = w.cloud();
    cloud.catalog = spillway_core::catalog::parse(CATALOG).expect("catalog");
    let mut settings = test_settings("aws-locality");
    settings.cloud = Some(cloud);
    let op = RunningOperator::start_with(w.client.clone(), None, settings)
        .await
        .expect("operator");
    w.fill_private_gpu().await;
    let ds = |n: &str| format!("{}-{n}", w.ns);
    w.submit("control", json!({}), None).await;
    w.submit("near", json!({"datasets": [ds("west")]}), None)
        .await;
    w.submit("far", json!({"datasets": [ds("home")]}), None)
        .await;
    w.submit("secret", json!({"datasets": [ds("secret")]}), None)
        .await;
    w.submit("restricted", json!({"datasets": [ds("patients")]}), None)
        .await;

    let pool_of = |j: &GpuJob| {
        j.status
            .clone()
            .unwrap_or_default()
            .pool
            .unwrap_or_default()
    };
    let control = w.wait_phase("control", JobPhase::Running).await;
    let near = w.wait_phase("near", JobPhase::Running).await;
    let far = w.wait_phase("far", JobPhase::Running).await;
    let secret = w.wait_phase("secret", JobPhase::Running).await;
    // Equal prices: with nothing to move, the first pool; with its data in us-west-2, that
    // region, because moving 100 GiB elsewhere costs $10.
    assert_eq!(pool_of(&control), east, "the tie goes east without data");
    assert_eq!(pool_of(&near), west, "the copy in us-west-2 decides");
    assert_eq!(
        pool_of(&secret),
        west,
        "Confidential data only where the policy allows"
    );
    let near_decision = near
        .status
        .clone()
        .unwrap_or_default()
        .decision
        .unwrap_or_default();
    assert_eq!(near_decision.estimated_egress_usd, Some(0.0));
    // Data with no cloud copy pays its egress wherever it goes; the decision says how much and
    // the job's cost includes it.
    let far_status = far.status.clone().unwrap_or_default();
    assert_eq!(
        far_status
            .decision
            .clone()
            .unwrap_or_default()
            .estimated_egress_usd,
        Some(5.0)
    );
    let launched = eventually(WAIT, "far's launch decision", || async {
        let j = Api::<GpuJob>::namespaced(w.client.clone(), &w.ns)
            .get("far")
            .await
            .map_err(|e| e.to_string())?;
        let cost = j
            .status
            .and_then(|s| s.cost)
            .map(|c| c.accrued_usd)
            .unwrap_or(0.0);
        if cost >= 5.0 {
            Ok(cost)
        } else {
            Err(format!("accrued {cost}"))
        }
    })
    .await;
    assert!(
        launched < 5.1,
        "egress once plus a little instance time: {launched}"
    );

    // Restricted: no launch at all, and the job says which dataset keeps it home.
    let d = eventually(WAIT, "the Restricted job's reason", || async {
        let d = decision_of(&w, "restricted").await;
        if d.reason.as_deref() == Some("RestrictedData") {
            Ok(d)
        } else {
            Err(format!("{d:?}"))
        }
    })
    .await;
    assert!(
        d.message.unwrap_or_default().contains(&ds("patients")),
        "names the dataset"
    );
    assert!(
        w.instances()
            .await
            .iter()
            .all(|(_, _, _, need)| !need.starts_with(&format!("{}/restricted", w.ns))),
        "no RunInstances for the Restricted job"
    );
    op.stop().await.expect("clean stop");
    let _ = Api::<BurstPolicy>::all(w.client.clone())
        .delete(&policy, &DeleteParams::default())
        .await;
}
