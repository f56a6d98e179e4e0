//! The webhook's rules on in-memory worlds, its AdmissionReview answers, and the certificates'
//! renewal.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use serde_json::{Value, json};
use spillway_api::GpuQueue;

use super::certs::{self, Material};
use super::review::{self, Lookup, Verdict};

#[derive(Default)]
struct World {
    queues: BTreeMap<String, Arc<GpuQueue>>,
    namespaces: BTreeMap<String, Arc<Namespace>>,
    readers: BTreeMap<String, Vec<String>>,
}

impl Lookup for World {
    fn queue(&self, name: &str) -> Option<Arc<GpuQueue>> {
        self.queues.get(name).cloned()
    }
    fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        self.namespaces.get(name).cloned()
    }
    fn cloud_readers(&self, dataset: &str) -> Vec<String> {
        self.readers.get(dataset).cloned().unwrap_or_default()
    }
}

fn world() -> World {
    let mut w = World::default();
    let q: GpuQueue = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
        "metadata": {"name": "research"},
        "spec": {"namespaces": ["ml"], "maxPriority": 10, "burst": {"enabled": true}},
    }))
    .unwrap();
    w.queues.insert("research".into(), Arc::new(q));
    w
}

fn job(spec: Value) -> Value {
    let mut base = json!({
        "queue": "research",
        "gpusPerReplica": 1,
        "template": {"spec": {"containers": [{"name": "train", "image": "pytorch:2"}]}},
    });
    for (k, v) in spec.as_object().unwrap() {
        base[k] = v.clone();
    }
    json!({"apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
           "metadata": {"name": "j", "namespace": "ml"}, "spec": base})
}

fn check(kind: &str, object: &Value, old: Option<&Value>) -> Verdict {
    review::review(kind, object, old, &world())
}

#[track_caller]
fn refused(v: &Verdict, needle: &str) {
    assert!(
        v.refusals.iter().any(|r| r.contains(needle)),
        "expected a refusal mentioning {needle:?}, got {v:?}"
    );
}

#[test]
fn a_good_job_passes_without_a_word() {
    assert_eq!(check("GpuJob", &job(json!({})), None), Verdict::default());
}

#[test]
fn a_misspelt_field_of_the_pod_template_is_refused_with_its_path() {
    let bad = job(json!({"template": {"spec": {"containers": [
        {"name": "train", "image": "pytorch:2", "imagePullPolcy": "Always"}],
        "restartPolicy": "Never", "nodeSelectr": {"a": "b"}}}}));
    let v = check("GpuJob", &bad, None);
    assert_eq!(v.refusals.len(), 2, "{v:?}");
    refused(
        &v,
        "spec.template.spec.containers[0].imagePullPolcy: unknown field",
    );
    refused(&v, "spec.template.spec.nodeSelectr: unknown field");
    // Fields every PodSpec knows, empty values and numbers for quantities are fine.
    let fine = job(
        json!({"template": {"metadata": {"labels": {"a": "b"}, "annotations": {}},
        "spec": {"containers": [{"name": "t", "image": "i", "env": [],
            "resources": {"limits": {"cpu": 2, "memory": "1Gi"}}}],
            "tolerations": [{"key": "k", "operator": "Exists"}]}}}),
    );
    assert_eq!(check("GpuJob", &fine, None), Verdict::default());
}

#[test]
fn the_jobs_own_rules_are_refused_with_the_field() {
    let v = check(
        "GpuJob",
        &job(json!({"estimatedRuntime": "2h", "maxRuntime": "1h"})),
        None,
    );
    refused(&v, "spec.estimatedRuntime");
    refused(&v, "exceeds maxRuntime");
}

#[test]
fn a_priority_above_the_queues_ceiling_and_a_namespace_it_does_not_admit_are_refused() {
    let v = check("GpuJob", &job(json!({"priority": 11})), None);
    refused(&v, "maxPriority 10");
    let mut other = job(json!({}));
    other["metadata"]["namespace"] = json!("shop");
    refused(
        &check("GpuJob", &other, None),
        "does not admit namespace \"shop\"",
    );
}

#[test]
fn a_queue_that_does_not_exist_yet_is_a_warning_not_a_refusal() {
    let v = check("GpuJob", &job(json!({"queue": "later"})), None);
    assert!(v.refusals.is_empty(), "{v:?}");
    assert!(v.warnings[0].contains("QueueNotFound"), "{v:?}");
}

#[test]
fn ignored_fields_are_warnings() {
    let v = check(
        "GpuJob",
        &job(
            json!({"placement": "PrivateOnly", "maxHourlyCost": 3.0, "checkpointInterval": "30m"}),
        ),
        None,
    );
    assert!(v.refusals.is_empty(), "{v:?}");
    assert_eq!(v.warnings.len(), 2, "{v:?}");
    let q = json!({"apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue", "metadata": {"name": "q"},
                   "spec": {"burst": {"enabled": false, "pools": ["aws"]}, "budget": {"monthlyUSD": 5}}});
    let v = check("GpuQueue", &q, None);
    assert!(v.refusals.is_empty(), "{v:?}");
    assert_eq!(v.warnings.len(), 2, "{v:?}");
}

#[test]
fn an_admitted_job_keeps_its_queue_and_shape_but_a_queued_one_may_move() {
    let mut running = job(json!({}));
    running["status"] = json!({"phase": "Running"});
    let v = check("GpuJob", &job(json!({"queue": "other"})), Some(&running));
    refused(
        &v,
        "spec.queue cannot change once the job has been admitted",
    );
    let v = check("GpuJob", &job(json!({"replicas": 2})), Some(&running));
    refused(&v, "spec.replicas and spec.gpusPerReplica cannot change");
    let mut queued = job(json!({}));
    queued["status"] = json!({"phase": "Queued"});
    let v = check("GpuJob", &job(json!({"queue": "other"})), Some(&queued));
    assert!(v.refusals.is_empty(), "{v:?}");
}

#[test]
fn an_update_that_leaves_the_spec_as_it_was_goes_through() {
    // Invalid now (the priority is above the ceiling), but the update only adds an annotation.
    let before = job(json!({"priority": 50}));
    let mut after = before.clone();
    after["metadata"]["annotations"] = json!({"spillway.io/trace": "x"});
    assert_eq!(check("GpuJob", &after, Some(&before)), Verdict::default());
    // The same spec created anew is refused.
    refused(&check("GpuJob", &after, None), "maxPriority");
}

#[test]
fn pools_queues_and_datasets_are_checked_by_the_operators_rules() {
    let pool = |spec: Value| json!({"apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool", "metadata": {"name": "p"}, "spec": spec});
    refused(
        &check("ComputePool", &pool(json!({})), None),
        "set exactly one of private, aws and cluster",
    );
    let private = pool(json!({"private": {"nodeSelector": {"gpu": "yes"}}}));
    let aws = pool(
        json!({"aws": {"region": "us-east-1", "amiId": "ami-1", "instanceTypes": ["g5.xlarge"]}}),
    );
    assert_eq!(check("ComputePool", &aws, None), Verdict::default());
    refused(
        &check("ComputePool", &aws, Some(&private)),
        "cannot change between private, aws and cluster",
    );
    let cluster = pool(json!({"cluster": {
        "kubeconfigSecretRef": {"name": "dc2", "namespace": "spillway-system"},
        "namespace": "gpu-jobs", "gpuCostPerHour": 0.5}}));
    let v = check("ComputePool", &cluster, None);
    assert!(v.refusals.is_empty(), "{v:?}");
    assert!(v.warnings.is_empty(), "{v:?}");
    refused(
        &check("ComputePool", &cluster, Some(&private)),
        "cannot change between private, aws and cluster",
    );
    let q = json!({"apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue", "metadata": {"name": "q"},
                   "spec": {"namespaces": ["a"], "namespaceSelector": {"matchLabels": {"t": "a"}}}});
    refused(&check("GpuQueue", &q, None), "not both");
    let ds = json!({"apiVersion": "spillway.io/v1alpha1", "kind": "Dataset", "metadata": {"name": "d"},
                    "spec": {"classification": "Internal", "locations": [{"environment": "aws"}]}});
    refused(&check("Dataset", &ds, None), "needs a region");
}

#[test]
fn restricting_a_dataset_that_cloud_jobs_read_is_refused_with_the_jobs() {
    let ds = |class: &str| {
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "Dataset",
        "metadata": {"name": "patients"}, "spec": {"classification": class}})
    };
    let mut w = world();
    w.readers.insert(
        "patients".into(),
        vec!["ml/train-1".into(), "ml/train-2".into()],
    );
    let v = review::review("Dataset", &ds("Restricted"), Some(&ds("Confidential")), &w);
    refused(
        &v,
        "2 GpuJobs reading \"patients\" run in the cloud (ml/train-1, ml/train-2)",
    );
    // Already Restricted, or no cloud reader: nothing to refuse.
    let v = review::review("Dataset", &ds("Restricted"), Some(&ds("Restricted")), &w);
    assert!(v.refusals.is_empty(), "{v:?}");
    let v = review::review(
        "Dataset",
        &ds("Restricted"),
        Some(&ds("Confidential")),
        &world(),
    );
    assert!(v.refusals.is_empty(), "{v:?}");
}

#[test]
fn a_policy_whose_rules_do_not_compile_or_type_check_is_refused_with_rule_and_column() {
    let policy = |when: &str| {
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "BurstPolicy",
        "metadata": {"name": "p"}, "spec": {"rules": [{"name": "big", "when": when, "forbid": "cloud"}]}})
    };
    assert_eq!(
        check("BurstPolicy", &policy("job.totalGpus > 8"), None),
        Verdict::default()
    );
    let v = check("BurstPolicy", &policy("jbo.totalGpus > 8"), None);
    refused(&v, "spec.rules[0].when (rule \"big\", column 1)");
    let v = check("BurstPolicy", &policy("job.totalGpus >"), None);
    refused(&v, "spec.rules[0].when (rule \"big\"");
}

fn admission_review(object: &Value, operation: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "spillway.io", "version": "v1alpha1", "kind": object["kind"]},
            "resource": {"group": "spillway.io", "version": "v1alpha1", "resource": "gpujobs"},
            "name": "j", "namespace": "ml", "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object, "oldObject": null, "dryRun": false,
        },
    }))
    .unwrap()
}

/// The answer to an AdmissionReview of `object`, and what the metrics count of it.
fn answered(object: &Value, operation: &str) -> (Value, super::Outcome) {
    let (body, outcome) = super::answer(&admission_review(object, operation), &world()).unwrap();
    (serde_json::from_slice(&body).unwrap(), outcome)
}

#[test]
fn an_admission_review_is_answered_with_its_uid_the_refusal_and_the_warnings() {
    let (out, outcome) = answered(&job(json!({"priority": 11})), "CREATE");
    let r = &out["response"];
    assert_eq!(out["kind"], "AdmissionReview");
    assert_eq!(r["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(r["allowed"], false);
    let message = r["status"]["message"].as_str().unwrap();
    assert!(message.contains("maxPriority 10"), "{out}");
    assert_eq!(outcome, ("GpuJob".to_string(), "refused"));

    let (out, outcome) = answered(&job(json!({"queue": "later"})), "CREATE");
    assert_eq!(out["response"]["allowed"], true);
    let warning = out["response"]["warnings"][0].as_str().unwrap();
    assert!(warning.contains("QueueNotFound"), "{out}");
    assert_eq!(outcome.1, "warned");

    // A deletion is not reviewed.
    let (out, outcome) = answered(&job(json!({"priority": 11})), "DELETE");
    assert_eq!(out["response"]["allowed"], true);
    assert_eq!(outcome.1, "allowed");
    assert!(super::answer(b"{}", &world()).is_err());
}

const DAY: i64 = 86_400;

fn hosts() -> Vec<String> {
    vec!["spillway-webhook.spillway.svc".into(), "127.0.0.1".into()]
}

#[test]
fn certificates_are_made_kept_and_renewed_when_a_third_of_their_life_is_left() {
    let now = 1_800_000_000;
    let first = certs::renewed(None, &hosts(), 90 * DAY, now)
        .unwrap()
        .expect("made");
    assert_eq!(first.not_after, now + 90 * DAY);
    assert_eq!(first.ca_not_after, now + 900 * DAY);
    assert!(first.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    // Stored and read back, it is the same, and it holds for two thirds of its life.
    let secret = first.to_secret("spillway", "spillway-webhook-tls");
    let back = Material::from_secret(&secret).expect("read back");
    assert_eq!(back, first);
    assert_eq!(
        certs::renewed(Some(&back), &hosts(), 90 * DAY, now + 59 * DAY).unwrap(),
        None
    );
    // Then the serving certificate is renewed by the same CA.
    let second = certs::renewed(Some(&back), &hosts(), 90 * DAY, now + 61 * DAY)
        .unwrap()
        .expect("renewed");
    assert_eq!(second.ca_pem, first.ca_pem);
    assert_ne!(second.cert_pem, first.cert_pem);
    // New host names: a new serving certificate at once.
    let mut more = hosts();
    more.push("spillway-webhook.spillway.svc.cluster.local".into());
    assert!(
        certs::renewed(Some(&back), &more, 90 * DAY, now + DAY)
            .unwrap()
            .is_some()
    );
}

#[test]
fn a_ca_near_its_end_is_replaced_and_the_old_one_trusted_until_it_expires() {
    let now = 1_800_000_000;
    let first = certs::renewed(None, &hosts(), 90 * DAY, now)
        .unwrap()
        .unwrap();
    let later = first.ca_not_after - 179 * DAY;
    let rotated = certs::renewed(Some(&first), &hosts(), 90 * DAY, later)
        .unwrap()
        .unwrap();
    assert_ne!(rotated.ca_pem, first.ca_pem);
    assert_eq!(
        rotated.previous_ca,
        Some((first.ca_pem.clone(), first.ca_not_after))
    );
    assert!(rotated.bundle().contains(&first.ca_pem) && rotated.bundle().contains(&rotated.ca_pem));
    // Once the old CA has expired it leaves the bundle.
    let after = first.ca_not_after + 1;
    let dropped = certs::renewed(Some(&rotated), &hosts(), 90 * DAY, after)
        .unwrap()
        .unwrap();
    assert_eq!(dropped.previous_ca, None);
    assert_eq!(dropped.ca_pem, rotated.ca_pem);
}

#[test]
fn the_serving_certificate_is_one_rustls_accepts_and_chains_to_the_bundle() {
    use rustls_pki_types::pem::PemObject;
    let now = crate::clock::now().as_millis() / 1000;
    let m = certs::renewed(None, &hosts(), 90 * DAY, now)
        .unwrap()
        .unwrap();
    let resolver = super::Resolver::default();
    assert!(
        resolver
            .load(m.cert_pem.as_bytes(), m.key_pem.as_bytes())
            .unwrap()
    );
    assert!(
        !resolver
            .load(m.cert_pem.as_bytes(), m.key_pem.as_bytes())
            .unwrap(),
        "unchanged"
    );
    // A client trusting only the bundle verifies the certificate for each host name.
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    for ca in rustls_pki_types::CertificateDer::pem_slice_iter(m.bundle().as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let verifier = tokio_rustls::rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        provider,
    )
    .build()
    .unwrap();
    use tokio_rustls::rustls::client::danger::ServerCertVerifier;
    let leaf = rustls_pki_types::CertificateDer::from_pem_slice(m.cert_pem.as_bytes()).unwrap();
    for host in hosts() {
        let name = rustls_pki_types::ServerName::try_from(host.clone()).unwrap();
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], rustls_pki_types::UnixTime::now())
            .unwrap_or_else(|e| panic!("{host}: {e}"));
    }
    let wrong = rustls_pki_types::ServerName::try_from("other.example").unwrap();
    assert!(
        verifier
            .verify_server_cert(&leaf, &[], &wrong, &[], rustls_pki_types::UnixTime::now())
            .is_err()
    );
}
