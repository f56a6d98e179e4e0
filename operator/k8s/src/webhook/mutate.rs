//! The mutating webhook (`/mutate`): a workload labelled `spillway.io/queue` is created held
//! (a batch Job suspended), as Kueue's webhook does, so none of its pods starts before Spillway
//! has placed it. One its user created suspended stays theirs: it is marked
//! [`wl::USER_SUSPENDED_ANNOTATION`] and left alone until the user lifts the suspension, which
//! the webhook then turns into Spillway's hold (the mark removed), so it is queued. A labelled
//! plain pod is made with the placement gate ([`wl::pod_group`]).

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::{Value, json};

use super::Outcome;
use crate::workloads::{self as wl, WorkloadKind};

/// `/metadata/annotations/<key>` as a JSON pointer (`/` escaped).
fn annotation_path(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

fn suspended(kind: &dyn WorkloadKind, object: &Value) -> bool {
    serde_json::from_value::<DynamicObject>(object.clone()).is_ok_and(|o| kind.suspended(&o))
}

/// The JSON patch operations for `object` (and the object before an update); what they do.
pub fn ops(
    kind: &dyn WorkloadKind,
    operation: &Operation,
    object: &Value,
    old: Option<&Value>,
) -> (Vec<Value>, &'static str) {
    let queue = format!("/metadata/labels/{}", wl::QUEUE_LABEL.replace('/', "~1"));
    if object.pointer(&queue).is_none() {
        return (Vec::new(), "allowed");
    }
    let mark = annotation_path(wl::USER_SUSPENDED_ANNOTATION);
    match operation {
        Operation::Create if suspended(kind, object) => {
            let op = match object.pointer("/metadata/annotations") {
                Some(Value::Object(_)) => json!({"op": "add", "path": mark, "value": "true"}),
                _ => json!({"op": "add", "path": "/metadata/annotations",
                            "value": {wl::USER_SUSPENDED_ANNOTATION: "true"}}),
            };
            (vec![op], "users")
        }
        Operation::Create => (kind.hold_ops(object), "held"),
        Operation::Update
            if old.is_some_and(|o| o.pointer(&mark).is_some()) && !suspended(kind, object) =>
        {
            let mut ops = kind.hold_ops(object);
            if object.pointer(&mark).is_some() {
                ops.push(json!({"op": "remove", "path": mark}));
            }
            (ops, "held")
        }
        _ => (Vec::new(), "allowed"),
    }
}

/// The answer to one AdmissionReview of `/mutate`: a labelled workload held, or a pod of a
/// workload's GpuJob given its identity and telemetry ([`super::pods`]).
pub fn answer(
    body: &[u8],
    world: &dyn super::pods::PodLookup,
) -> Result<(Vec<u8>, Outcome), String> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| format!("not an AdmissionReview: {e}"))?;
    let request: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|e| format!("an AdmissionReview without a request: {e}"))?;
    let mut response = AdmissionResponse::from(&request);
    let mut result = "allowed";
    let api_version = match request.kind.group.as_str() {
        "" => request.kind.version.clone(),
        g => format!("{g}/{}", request.kind.version),
    };
    if api_version == "v1"
        && request.kind.kind == "Pod"
        && request.operation == Operation::Create
        && let Some(object) = &request.object
    {
        let before = serde_json::to_value(object).map_err(|e| e.to_string())?;
        let pod: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(before.clone()).map_err(|e| format!("not a Pod: {e}"))?;
        let placed = pod.metadata.labels.as_ref();
        let placed = placed.is_some_and(|l| l.contains_key(crate::labels::JOB_UID_LABEL));
        if wl::pod_group::opted_in(&pod) && !placed {
            // A plain pod opted in: made held by the placement gate.
            let ops = wl::PodGroup.hold_ops(&before);
            if !ops.is_empty() {
                let patch: json_patch::Patch =
                    serde_json::from_value(Value::Array(ops)).map_err(|e| e.to_string())?;
                response = response.with_patch(patch).map_err(|e| e.to_string())?;
                result = "held";
                tracing::info!(pod = %request.name, namespace = ?request.namespace, "admission: a labelled pod made held");
            }
        } else if let Some(mutated) = super::pods::mutate(&pod, world) {
            let after = serde_json::to_value(&mutated).map_err(|e| e.to_string())?;
            let patch = json_patch::diff(&before, &after);
            if !patch.0.is_empty() {
                response = response.with_patch(patch).map_err(|e| e.to_string())?;
                result = "injected";
            }
        }
    } else if let Some(kind) = wl::by_kind(&api_version, &request.kind.kind)
        && let Some(object) = &request.object
    {
        let to_json = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_default();
        let old = request.old_object.as_ref().map(to_json);
        let (ops, what) = ops(kind, &request.operation, &to_json(object), old.as_ref());
        if !ops.is_empty() {
            let patch: json_patch::Patch =
                serde_json::from_value(Value::Array(ops)).map_err(|e| e.to_string())?;
            response = response.with_patch(patch).map_err(|e| e.to_string())?;
            result = what;
            tracing::info!(kind = %request.kind.kind, name = %request.name, namespace = ?request.namespace, what, "admission: workload mutated");
        }
    }
    let out = serde_json::to_vec(&response.into_review()).map_err(|e| e.to_string())?;
    Ok((out, (request.kind.kind.clone(), result)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::pods::{PodLookup, PodSettings};
    use crate::workloads::BatchJob;

    /// A cluster with no GpuJob, queue or pool.
    struct NoPods(PodSettings);

    impl PodLookup for NoPods {
        fn job(&self, _: &str, _: &str) -> Option<std::sync::Arc<spillway_api::GpuJob>> {
            None
        }
        fn queue(&self, _: &str) -> Option<std::sync::Arc<spillway_api::GpuQueue>> {
            None
        }
        fn pool(&self, _: &str) -> Option<std::sync::Arc<spillway_api::ComputePool>> {
            None
        }
        fn settings(&self) -> &PodSettings {
            &self.0
        }
    }

    fn job(suspend: Option<bool>, annotations: Option<Value>) -> Value {
        let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "labels": {"spillway.io/queue": "q"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        if let Some(s) = suspend {
            j["spec"]["suspend"] = json!(s);
        }
        if let Some(a) = annotations {
            j["metadata"]["annotations"] = a;
        }
        j
    }

    fn apply(object: &Value, ops: Vec<Value>) -> Value {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
        let mut out = object.clone();
        json_patch::patch(&mut out, &patch).expect("the patch applies");
        out
    }

    #[test]
    fn a_labelled_job_is_created_suspended_and_one_its_user_suspended_is_marked_theirs() {
        for created in [job(None, None), job(Some(false), Some(json!({"a": "b"})))] {
            let (changes, what) = ops(&BatchJob, &Operation::Create, &created, None);
            assert_eq!(what, "held");
            let stored = apply(&created, changes);
            assert_eq!(stored["spec"]["suspend"], json!(true));
            assert!(stored["metadata"]["annotations"][wl::USER_SUSPENDED_ANNOTATION].is_null());
        }
        for created in [
            job(Some(true), None),
            job(Some(true), Some(json!({"a": "b"}))),
        ] {
            let (changes, what) = ops(&BatchJob, &Operation::Create, &created, None);
            assert_eq!(what, "users");
            let stored = apply(&created, changes);
            assert_eq!(
                stored["metadata"]["annotations"][wl::USER_SUSPENDED_ANNOTATION],
                "true"
            );
            assert_eq!(stored["spec"]["suspend"], json!(true));
        }
        // Not labelled: untouched.
        let mut plain = job(None, None);
        plain["metadata"]["labels"] = json!({});
        assert!(
            ops(&BatchJob, &Operation::Create, &plain, None)
                .0
                .is_empty()
        );
    }

    #[test]
    fn the_user_lifting_their_suspension_hands_the_job_to_spillway() {
        let mark = json!({wl::USER_SUSPENDED_ANNOTATION: "true"});
        let old = job(Some(true), Some(mark.clone()));
        let lifted = job(Some(false), Some(mark));
        let (changes, what) = ops(&BatchJob, &Operation::Update, &lifted, Some(&old));
        assert_eq!(what, "held");
        let stored = apply(&lifted, changes);
        assert_eq!(stored["spec"]["suspend"], json!(true));
        assert!(stored["metadata"]["annotations"][wl::USER_SUSPENDED_ANNOTATION].is_null());
        // Spillway's own run of a job it holds (no mark) passes unchanged.
        let held = job(Some(true), None);
        let run = job(Some(false), None);
        assert!(
            ops(&BatchJob, &Operation::Update, &run, Some(&held))
                .0
                .is_empty()
        );
    }

    #[test]
    fn a_review_answers_with_a_json_patch() {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "r1", "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
                "name": "train", "namespace": "ml", "operation": "CREATE",
                "userInfo": {"username": "alice"}, "object": job(None, None),
            },
        });
        let world = NoPods(Default::default());
        let (out, (kind, result)) = answer(&serde_json::to_vec(&review).unwrap(), &world).unwrap();
        assert_eq!((kind.as_str(), result), ("Job", "held"));
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out["response"]["allowed"], json!(true));
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        // kube writes the patch's bytes as a JSON array (the API server reads either form).
        let bytes: Vec<u8> = serde_json::from_value(out["response"]["patch"].clone()).unwrap();
        let patch: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/suspend", "value": true}])
        );
    }
}
