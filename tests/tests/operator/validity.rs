//! Every kind reports its own validity through the running operator: `Ready=False` with
//! reason `Invalid` and the field, a Warning Event, and the object left out of decisions.

use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Api, Client};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuQueue};
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

/// Creates an object as written (a typed round trip would add fields the test did not set).
async fn apply<K>(client: &Client, obj: serde_json::Value)
where
    K: kube::Resource<DynamicType = ()>,
{
    let o: DynamicObject = serde_json::from_value(obj).expect("object JSON");
    Api::<DynamicObject>::all_with(client.clone(), &ApiResource::erase::<K>(&()))
        .create(&PostParams::default(), &o)
        .await
        .expect("create");
}

/// The `Ready` condition of a cluster-scoped object: (status, reason, message).
async fn ready<K: kube::Resource<DynamicType = ()>>(
    client: &Client,
    name: &str,
) -> Result<(String, String, String), String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::erase::<K>(&()));
    let o = api.get(name).await.map_err(|e| e.to_string())?;
    o.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("status"), s("reason"), s("message"))
        })
        .ok_or_else(|| format!("no Ready condition yet: {}", o.data["status"]))
}

async fn wait_invalid<K: kube::Resource<DynamicType = ()>>(
    client: &Client,
    name: &str,
    field: &str,
) -> String {
    eventually(WAIT, &format!("{name} to be Ready=False"), || async {
        let (status, reason, message) = ready::<K>(client, name).await?;
        if status == "False" && reason == "Invalid" && message.contains(field) {
            Ok(message)
        } else {
            Err(format!("{status} {reason} {message}"))
        }
    })
    .await
}

/// A Warning Event with reason `Invalid` about `name` (cluster-scoped objects' Events are in
/// `kube-system`).
async fn wait_warning(client: &Client, name: &str) {
    let events: Api<Event> = Api::namespaced(client.clone(), "kube-system");
    eventually(WAIT, &format!("a Warning Event about {name}"), || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.reason.as_deref() == Some("Invalid")
                    && e.type_.as_deref() == Some("Warning")
            })
            .map(|_| ())
            .ok_or_else(|| format!("{} Events in kube-system", list.items.len()))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_objects_of_every_kind_say_so_and_are_left_out() {
    let _turn = serial().await;
    let w = World::new("op-validity").await;
    w.nodes(1, 8, None).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let c = &w.client;
    let queue = format!("{}-both", w.ns);
    let pool = format!("{}-everything", w.ns);
    let dataset = format!("{}-nowhere", w.ns);
    let policy = format!("{}-typo", w.ns);
    let misnamed = format!("{}-misnamed", w.ns);
    // Each passes the CRDs' schemas and CEL rules (what those refuse never gets stored:
    // tests/tests/crd_rules.rs), and no webhook runs here: the operator finds what is wrong.
    apply::<GpuQueue>(
        c,
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
               "metadata": {"name": queue},
               "spec": {"namespaces": [w.ns], "burst": {"enabled": true, "waitCostPerHour": 0}}}),
    )
    .await;
    apply::<ComputePool>(
        c,
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
               "metadata": {"name": pool}, "spec": {"cluster": {
                   "kubeconfigSecretRef": {"name": "dc2", "namespace": w.ns},
                   "namespace": "gpu-jobs", "gpuCostPerHour": 1, "location": " "}}}),
    )
    .await;
    apply::<Dataset>(
        c,
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "Dataset",
               "metadata": {"name": dataset},
               "spec": {"classification": "Internal",
                        "locations": [{"environment": "aws", "region": " "}]}}),
    )
    .await;
    apply::<BurstPolicy>(
        c,
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "BurstPolicy",
               "metadata": {"name": policy},
               "spec": {"rules": [{"name": "big", "when": "job.totalGpus >> 8", "forbid": "cloud"}]}}),
    )
    .await;

    // Parses as CEL, but `spillway policy lint` rejects it: the operator does too.
    apply::<BurstPolicy>(
        c,
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "BurstPolicy",
               "metadata": {"name": misnamed},
               "spec": {"rules": [{"name": "big", "when": "jbo.totalGpus > 8", "forbid": "cloud"}]}}),
    )
    .await;

    wait_invalid::<GpuQueue>(c, &queue, "spec.burst.waitCostPerHour").await;
    wait_invalid::<ComputePool>(c, &pool, "spec.cluster.location").await;
    wait_invalid::<Dataset>(c, &dataset, "spec.locations[0].region").await;
    let message = wait_invalid::<BurstPolicy>(c, &policy, "spec.rules[0].when").await;
    assert!(
        message.contains("rule \"big\", column"),
        "names the rule and the column: {message}"
    );
    let message = wait_invalid::<BurstPolicy>(c, &misnamed, "spec.rules[0].when").await;
    assert!(
        message.contains("rule \"big\", column 1") && message.contains("unknown variable `jbo`"),
        "the message lint prints, with rule and column: {message}"
    );
    for name in [&queue, &pool, &dataset, &policy, &misnamed] {
        wait_warning(c, name).await;
    }

    // Left out of decisions, visibly: a job of the invalid queue waits and says why; a job
    // reading the invalid dataset too. The test's own valid pool still places other work.
    w.submit_to("stuck", &queue, json!({}), None).await;
    w.submit("reader", json!({"datasets": [dataset]}), None)
        .await;
    w.submit("fine", json!({}), None).await;
    w.wait_phase("fine", JobPhase::Running).await;
    for (job, reason) in [("stuck", "QueueInvalid"), ("reader", "DatasetInvalid")] {
        eventually(WAIT, &format!("{job} to say {reason}"), || async {
            let j = w.jobs().get(job).await.map_err(|e| e.to_string())?;
            let d = j.status.and_then(|s| s.decision).unwrap_or_default();
            if d.reason.as_deref() == Some(reason) {
                Ok(())
            } else {
                Err(format!("{d:?}"))
            }
        })
        .await;
    }

    // `kubectl get gpuqueues` shows readiness.
    let req = http::Request::get(format!("/apis/spillway.io/v1alpha1/gpuqueues/{queue}"))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .expect("request");
    let table: serde_json::Value = c.request(req).await.expect("table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let at = columns
        .iter()
        .position(|c| *c == "Ready")
        .expect("a Ready column");
    assert_eq!(table["rows"][0]["cells"][at], "False", "{table}");

    // Fixed, the queue turns Ready.
    Api::<GpuQueue>::all(c.clone())
        .patch(
            &queue,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"burst": {"waitCostPerHour": 5}}})),
        )
        .await
        .expect("fix the queue");
    eventually(WAIT, "the queue to be Ready", || async {
        match ready::<GpuQueue>(c, &queue).await? {
            (s, _, _) if s == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    op.stop().await.expect("clean stop");
    let dp = DeleteParams::default();
    let _ = Api::<GpuQueue>::all(c.clone()).delete(&queue, &dp).await;
    let _ = Api::<ComputePool>::all(c.clone()).delete(&pool, &dp).await;
    let _ = Api::<Dataset>::all(c.clone()).delete(&dataset, &dp).await;
    for p in [&policy, &misnamed] {
        let _ = Api::<BurstPolicy>::all(c.clone()).delete(p, &dp).await;
    }
}
