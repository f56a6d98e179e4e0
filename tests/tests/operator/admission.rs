//! The admission webhook through the real API server: bad objects of each kind refused at
//! creation with the reason, an admitted job's queue fixed, a warning for a queue that does not
//! exist yet, the certificate made by the operator and trusted through the `caBundle` it keeps,
//! and an operator outage that blocks nothing.
//!
//! The configuration calls the operator at `https://127.0.0.1:PORT/validate` (the chart's calls
//! a Service) and selects only objects labelled for this test, so the other tests of the binary
//! never meet it.

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Api, Client};
use serde_json::{Value, json};
use spillway_api::job::JobPhase;
use spillway_api::{BurstPolicy, GpuJob};
use spillway_tests::operator::{RunningOperator, eventually, local_webhook, serial, test_settings};
use spillway_tests::workload::WAIT;

use crate::world::World;

const LABEL: &str = "spillway.io/webhook-test";

fn configuration(name: &str, port: u16, run: &str) -> ValidatingWebhookConfiguration {
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "validate.spillway.io",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate")},
            "rules": [{"apiGroups": ["spillway.io"], "apiVersions": ["v1alpha1"],
                       "operations": ["CREATE", "UPDATE"],
                       "resources": ["gpujobs", "gpuqueues", "computepools", "datasets", "burstpolicies"]}],
            "objectSelector": {"matchLabels": {LABEL: run}},
            "failurePolicy": "Ignore", "sideEffects": "None", "timeoutSeconds": 5,
            "admissionReviewVersions": ["v1"],
        }],
    }))
    .expect("configuration JSON")
}

/// Creates `obj` (of kind `K`) as written; the refusal's text on failure.
async fn create<K: kube::Resource<DynamicType = ()>>(
    client: &Client,
    ns: Option<&str>,
    obj: Value,
) -> Result<(), String> {
    let o: DynamicObject = serde_json::from_value(obj).expect("object JSON");
    let ar = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.create(&PostParams::default(), &o)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// POSTs `obj` and returns the response's `Warning` headers (kube's client does not show them;
/// `kubectl` prints them).
async fn warnings_of_create(client: &Client, path: &str, obj: &Value) -> Vec<String> {
    let request = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(obj).unwrap().into())
        .unwrap();
    let response = client.send(request).await.expect("POST");
    assert!(
        response.status().is_success(),
        "created: {}",
        response.status()
    );
    response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn bad_objects_are_refused_at_apply_and_an_outage_blocks_nothing() {
    let _turn = serial().await;
    let world = World::new("admit").await;
    world.nodes(1, 8, None).await;
    let (client, ns) = (world.client.clone(), world.ns.clone());
    let run = ns.clone();
    let port = spillway_tests::free_port().expect("port");
    let name = format!("spillway-{ns}");
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configs
        .create(&PostParams::default(), &configuration(&name, port, &run))
        .await
        .expect("webhook configuration");
    let webhook = local_webhook(&ns, port, &name);
    let start = || {
        RunningOperator::start_full(
            client.clone(),
            None,
            test_settings("admission"),
            Some(webhook.clone()),
        )
    };
    let operator = start().await.expect("operator");

    // The operator makes the certificate and puts its CA in the configuration.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let bundle = eventually(WAIT, "the caBundle", || async {
        let c = configs.get(&name).await.map_err(|e| e.to_string())?;
        let hooks = c.webhooks.unwrap_or_default();
        hooks[0]
            .client_config
            .ca_bundle
            .clone()
            .ok_or("no caBundle yet".to_string())
    })
    .await;
    // The CA is trusted before it serves: the Secret is written right after the caBundle.
    let secret = eventually(WAIT, "the certificate's Secret", || async {
        (secrets
            .get_opt("spillway-webhook-tls")
            .await
            .map_err(|e| e.to_string())?)
        .ok_or("not written yet".to_string())
    })
    .await;
    assert_eq!(secret.data.as_ref().unwrap()["ca.crt"], bundle);

    let labels = json!({LABEL: run});
    let queue = world.queue.clone();
    let job = |name: &str, spec: Value| {
        let mut base = json!({"queue": queue, "gpusPerReplica": 1,
            "template": {"spec": {"containers": [{"name": "t", "image": "busybox"}]}}});
        for (k, v) in spec.as_object().unwrap() {
            base[k] = v.clone();
        }
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
               "metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": base})
    };

    // Until the certificate is served and trusted, the API server ignores the webhook (the
    // failure policy); then a misspelt template field is refused, naming it.
    let typo = job(
        "typo",
        json!({"template": {"spec": {"containers": [
        {"name": "t", "image": "busybox", "imagePullPolcy": "Always"}]}}}),
    );
    let refusal = eventually(WAIT, "the misspelt field refused", || async {
        match create::<GpuJob>(&client, Some(&ns), typo.clone()).await {
            Ok(()) => {
                let _ = Api::<GpuJob>::namespaced(client.clone(), &ns)
                    .delete("typo", &DeleteParams::default())
                    .await;
                Err("accepted".to_string())
            }
            Err(e) => Ok(e),
        }
    })
    .await;
    assert!(refusal.contains("denied the request"), "{refusal}");
    assert!(
        refusal.contains("spec.template.spec.containers[0].imagePullPolcy: unknown field"),
        "{refusal}"
    );

    let refused = create::<GpuJob>(&client, Some(&ns), job("greedy", json!({"priority": 5})))
        .await
        .unwrap_err();
    assert!(refused.contains("maxPriority 0"), "{refused}");
    let policy = format!("{ns}-p");
    let refused = create::<BurstPolicy>(
        &client,
        None,
        json!({"apiVersion": "spillway.io/v1alpha1",
        "kind": "BurstPolicy", "metadata": {"name": policy, "labels": labels},
        "spec": {"rules": [{"name": "big", "when": "jbo.totalGpus > 8", "forbid": "cloud"}]}}),
    )
    .await
    .unwrap_err();
    assert!(
        refused.contains("spec.rules[0].when (rule \"big\""),
        "{refused}"
    );
    let refused = create::<spillway_api::ComputePool>(
        &client,
        None,
        json!({"apiVersion": "spillway.io/v1alpha1",
        "kind": "ComputePool", "metadata": {"name": format!("{ns}-pool"), "labels": labels},
        "spec": {"private": {"nodeSelector": {}}}}),
    )
    .await
    .unwrap_err();
    // What the CRDs' CEL rules refuse, the API server refuses before any webhook is asked
    // (schema validation runs first): the rule's field and sentence.
    assert!(
        refused.contains("spec.private")
            && refused.contains("nodeSelector must name at least one label"),
        "{refused}"
    );
    let refused = create::<spillway_api::GpuQueue>(
        &client,
        None,
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
               "metadata": {"name": format!("{ns}-both"), "labels": labels},
               "spec": {"namespaces": [ns], "namespaceSelector": {"matchLabels": {"a": "b"}}}}),
    )
    .await
    .unwrap_err();
    // (1.37 says `spec: Invalid value: <message>`; 1.34 `spec: Invalid value: "object": ...`.)
    assert!(
        refused.contains("spec: Invalid value: ")
            && refused.contains("set either namespaces or namespaceSelector, not both"),
        "{refused}"
    );
    let refused = create::<spillway_api::Dataset>(
        &client,
        None,
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "Dataset",
               "metadata": {"name": format!("{ns}-data"), "labels": labels},
               "spec": {"classification": "Internal", "locations": [{"environment": "aws"}]}}),
    )
    .await
    .unwrap_err();
    assert!(
        refused.contains("spec.locations[0]: Invalid value: ")
            && refused.contains("an aws location needs a region"),
        "{refused}"
    );

    // A queue that does not exist yet: stored, with a warning kubectl prints.
    let warnings = warnings_of_create(
        &client,
        &format!("/apis/spillway.io/v1alpha1/namespaces/{ns}/gpujobs"),
        &job("early", json!({"queue": format!("{ns}-later")})),
    )
    .await;
    assert!(
        warnings.iter().any(|w| w.contains("QueueNotFound")),
        "{warnings:?}"
    );

    // An admitted job keeps its queue; a label change still goes through.
    create::<GpuJob>(&client, Some(&ns), job("fixed", json!({})))
        .await
        .expect("a good job");
    world.wait_phase("fixed", JobPhase::Running).await;
    let jobs: Api<GpuJob> = Api::namespaced(client.clone(), &ns);
    let moved = jobs
        .patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"queue": format!("{ns}-other")}})),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        moved.contains("spec.queue cannot change once the job has been admitted"),
        "{moved}"
    );
    jobs.patch(
        "fixed",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .expect("a label change goes through");

    let metrics = operator.metrics.render();
    for result in ["refused", "warned"] {
        let series =
            format!(r#"spillway_webhook_reviews_total{{kind="GpuJob",result="{result}"}}"#);
        assert!(metrics.contains(&series), "{series} in\n{metrics}");
    }

    // The operator down: Spillway's objects are still accepted (checked again by the operator
    // when it is back) and nothing else is touched.
    operator.stop().await.expect("stopped");
    create::<GpuJob>(&client, Some(&ns), job("unchecked", json!({"priority": 5})))
        .await
        .expect("accepted while the webhook is down");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "plain"}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("unrelated objects never meet the webhook");

    // Back up: the same certificate is served again (the Secret is kept), and refusals resume.
    let operator = start().await.expect("operator again");
    eventually(WAIT, "refusals again", || async {
        match create::<GpuJob>(&client, Some(&ns), job("greedy2", json!({"priority": 5}))).await {
            Ok(()) => {
                let _ = jobs.delete("greedy2", &DeleteParams::default()).await;
                Err("accepted".to_string())
            }
            Err(e) if e.contains("maxPriority") => Ok(()),
            Err(e) => Err(e),
        }
    })
    .await;
    let again = secrets.get("spillway-webhook-tls").await.expect("Secret");
    assert_eq!(
        again.data.unwrap()["tls.crt"],
        secret.data.unwrap()["tls.crt"],
        "the certificate was kept"
    );
    operator.stop().await.expect("stopped");
    let _ = configs.delete(&name, &DeleteParams::default()).await;
}
