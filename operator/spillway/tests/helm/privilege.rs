//! What the chart's ServiceAccount token cannot do, tried with that token against the real
//! API server: read, change or delete a Secret it did not make (in a job namespace, another
//! and kube-system), plant a Secret in kube-system other than an expiring bootstrap token of
//! Spillway's group, create or delete a Job, or (installed with `rbac.jobNamespaces`) create a
//! pod or patch a Job outside them; and, asked of the API server's authorizer
//! (`SelfSubjectAccessReview`, kubectl's `auth can-i`), what it may do to each integration's
//! kind.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use spillway_tests::cluster::TestCluster;
use spillway_tests::operator::eventually;

use super::install::{WAIT, create};

/// Every refusal the install test checks before the operator runs; `ns` is the release (and
/// job) namespace; Helm 4's install names it in `rbac.jobNamespaces`. Returns the namespaces of
/// the Secrets planted for the operator not to touch (checked again after it ran).
pub async fn refused_what_the_chart_does_not_grant(
    cluster: &TestCluster,
    client: &Client,
    sa: &Client,
    ns: &str,
    helm_major: u8,
) -> Vec<String> {
    let (client, ns) = (client.clone(), ns.to_string());
    let sa = sa.clone();
    let refused = Api::<Secret>::all(sa.clone())
        .list(&ListParams::default())
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "a cluster-wide Secret list must be refused: {refused:?}"
    );
    let refused = Api::<Secret>::namespaced(sa.clone(), "kube-system")
        .get("bootstrap-signer")
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "{refused:?}"
    );
    let refused = Api::<Secret>::namespaced(sa.clone(), &ns)
        .list(&ListParams::default())
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "only the issuer's keys may be read in the release namespace: {refused:?}"
    );
    // Secrets Spillway did not make, in the job namespace, in another and in kube-system: the
    // operator can neither read, list, change nor delete them.
    let other = cluster
        .namespace(&client, &format!("{ns}-other"))
        .await
        .expect("ns");
    let victims = [ns.clone(), other, "kube-system".to_string()];
    for at in &victims {
        create(
            Api::<Secret>::namespaced(client.clone(), at),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": format!("{ns}-users-own")},
                   "stringData": {"password": "hunter2"}}),
        )
        .await;
        assert_refused_everything(&sa, at, &format!("{ns}-users-own")).await;
    }
    // kube-system: the bootstrap Role lets the operator create Secrets there (RBAC cannot name
    // them in advance), and the chart's ValidatingAdmissionPolicy holds that to expiring
    // bootstrap tokens of Spillway's own group.
    let planted = [
        json!({"metadata": {"name": format!("{ns}-planted")}, "stringData": {"x": "y"}}),
        json!({"type": "bootstrap.kubernetes.io/token",
               "metadata": {"name": "bootstrap-token-kubadm"},
               "stringData": {"token-id": "kubadm", "token-secret": "0123456789abcdef",
                   "expiration": "2099-01-01T00:00:00Z", "usage-bootstrap-authentication": "true",
                   "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}}),
        json!({"type": "bootstrap.kubernetes.io/token",
               "metadata": {"name": "bootstrap-token-forevr"},
               "stringData": {"token-id": "forevr", "token-secret": "0123456789abcdef",
                   "usage-bootstrap-authentication": "true",
                   "auth-extra-groups": "system:bootstrappers:spillway"}}),
    ];
    let kube_system = Api::<Secret>::namespaced(sa.clone(), "kube-system");
    for mut secret in planted {
        secret["apiVersion"] = json!("v1");
        secret["kind"] = json!("Secret");
        let s: Secret = serde_json::from_value(secret.clone()).unwrap();
        // The API server enforces a policy a moment after it is created (once its informer
        // has it): until then, what got through is taken away and tried again.
        eventually(WAIT, "the bootstrap-token policy to refuse", || async {
            match kube_system.create(&PostParams::default(), &s).await {
                Err(kube::Error::Api(e))
                    if e.code == 403
                        && e.message.contains(
                            "bootstrap tokens of the group system:bootstrappers:spillway",
                        ) =>
                {
                    Ok(())
                }
                Ok(made) => {
                    let _ = Api::<Secret>::namespaced(client.clone(), "kube-system")
                        .delete(&made.name_any(), &DeleteParams::default())
                        .await;
                    Err(format!(
                        "the operator's token planted {secret} in kube-system"
                    ))
                }
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
    }
    if helm_major >= 4 {
        // Installed with rbac.jobNamespaces: pods only there.
        for at in ["kube-system".to_string(), format!("{ns}-other")] {
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "planted"},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
            .unwrap();
            let r = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(sa.clone(), &at)
                .create(&PostParams::default(), &pod)
                .await;
            assert!(
                matches!(&r, Err(kube::Error::Api(e)) if e.code == 403),
                "the operator's token created a pod in {at}: {r:?}"
            );
        }
    }
    // Labelled batch Jobs (the chart's integrations): seen everywhere, never created or
    // deleted; patched (suspended, run) only in rbac.jobNamespaces when it is set.
    use k8s_openapi::api::batch::v1::Job;
    let listed = Api::<Job>::all(sa.clone())
        .list(&ListParams::default().limit(1))
        .await;
    assert!(listed.is_ok(), "the operator must list Jobs: {listed:?}");
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "planted"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox"}]}}}}))
    .unwrap();
    let r = Api::<Job>::namespaced(sa.clone(), &ns)
        .create(&PostParams::default(), &job)
        .await;
    assert!(
        matches!(&r, Err(kube::Error::Api(e)) if e.code == 403),
        "the operator's token created a Job: {r:?}"
    );
    let r = Api::<Job>::namespaced(sa.clone(), &ns)
        .delete("planted", &DeleteParams::default())
        .await;
    assert!(
        matches!(&r, Err(kube::Error::Api(e)) if e.code == 403),
        "the operator's token may delete Jobs: {r:?}"
    );
    let suspend = Patch::Merge(json!({"spec": {"suspend": true}}));
    for (at, allowed) in [(ns.clone(), true), (format!("{ns}-other"), helm_major < 4)] {
        // Allowed: the Job is not there (404); refused: 403 before it is looked up.
        let r = Api::<Job>::namespaced(sa.clone(), &at)
            .patch("absent", &PatchParams::default(), &suspend)
            .await;
        let code = match &r {
            Err(kube::Error::Api(e)) => e.code,
            _ => 0,
        };
        assert_eq!(
            code,
            if allowed { 404 } else { 403 },
            "patch a Job in {at}: {r:?}"
        );
    }
    victims.to_vec()
}

/// With the operator's ServiceAccount token, every get, list, patch and delete of `name` in
/// `ns` (and a list of the namespace's Secrets) is refused.
pub async fn assert_refused_everything(sa: &Client, ns: &str, name: &str) {
    let api = Api::<Secret>::namespaced(sa.clone(), ns);
    let forbidden = |what: &str, r: Result<(), kube::Error>| {
        assert!(
            matches!(&r, Err(kube::Error::Api(s)) if s.code == 403),
            "{what} {ns}/{name} with the operator's token must be refused: {r:?}"
        );
    };
    forbidden("get", api.get(name).await.map(|_| ()));
    forbidden("list", api.list(&ListParams::default()).await.map(|_| ()));
    let patch = json!({"metadata": {"labels": {"touched": "yes"}}});
    forbidden(
        "merge-patch",
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ()),
    );
    let apply = json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": name}, "stringData": {"password": "x"}});
    forbidden(
        "apply",
        api.patch(
            name,
            &PatchParams::apply("spillway").force(),
            &Patch::Apply(&apply),
        )
        .await
        .map(|_| ()),
    );
    forbidden(
        "delete",
        api.delete(name, &DeleteParams::default()).await.map(|_| ()),
    );
}

/// Whether the token of `sa` may `verb` `resource` of `group` in `ns` (cluster-wide when
/// `None`), as `kubectl auth can-i` asks.
async fn can_i(sa: &Client, verb: &str, group: &str, resource: &str, ns: Option<&str>) -> bool {
    can_i_named(sa, verb, group, resource, ns, None).await
}

/// [`can_i`] of the object named `name` (`kubectl auth can-i VERB RESOURCE/NAME`).
async fn can_i_named(
    sa: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    ns: Option<&str>,
    name: Option<&str>,
) -> bool {
    use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                        "namespace": ns, "name": name}},
    }))
    .expect("a review");
    let made = Api::<SelfSubjectAccessReview>::all(sa.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview");
    made.status.is_some_and(|s| s.allowed)
}

/// Each integration's kind (their CRDs installed before the chart): seen everywhere, patched
/// (held, run) in the job namespace and, installed with `rbac.jobNamespaces` (Helm 4 here),
/// nowhere else, never created or deleted; pods patched (pod groups run, gated pods pinned).
pub async fn workloads_granted_only_what_their_integration_needs(
    sa: &Client,
    ns: &str,
    helm_major: u8,
) {
    let other = format!("{ns}-other");
    let kinds = [
        ("batch", "jobs"),
        ("jobset.x-k8s.io", "jobsets"),
        ("trainer.kubeflow.org", "trainjobs"),
        ("ray.io", "rayjobs"),
    ];
    for (group, resource) in kinds {
        for verb in ["list", "watch"] {
            assert!(
                can_i(sa, verb, group, resource, None).await,
                "{verb} {resource}"
            );
        }
        assert!(
            can_i(sa, "patch", group, resource, Some(ns)).await,
            "patch {resource} in {ns}"
        );
        assert_eq!(
            can_i(sa, "patch", group, resource, Some(&other)).await,
            helm_major < 4,
            "patch {resource} in {other}"
        );
        for verb in ["create", "delete", "update"] {
            assert!(
                !can_i(sa, verb, group, resource, Some(ns)).await,
                "{verb} {resource} must be refused"
            );
        }
    }
    // Their child objects are the peers' controllers' to make: never Spillway's.
    for (group, resource) in [
        ("ray.io", "rayclusters"),
        ("trainer.kubeflow.org", "clustertrainingruntimes"),
    ] {
        assert!(
            !can_i(sa, "get", group, resource, Some(ns)).await,
            "get {resource} must be refused"
        );
    }
    assert!(can_i(sa, "patch", "", "pods", Some(ns)).await);
    assert_eq!(
        can_i(sa, "patch", "", "pods", Some(&other)).await,
        helm_major < 4,
        "patch pods in {other}"
    );
}

/// The sixteen tokens Secrets of a job namespace, by name: created and patched, never read;
/// a seventeenth name is refused.
pub async fn tokens_secrets_granted_by_name(sa: &Client, ns: &str) {
    for name in spillway_k8s::identity::tokens_secret_names() {
        for verb in ["create", "patch"] {
            assert!(
                can_i_named(sa, verb, "", "secrets", Some(ns), Some(&name)).await,
                "{verb} secrets/{name}"
            );
        }
        assert!(
            !can_i_named(sa, "get", "", "secrets", Some(ns), Some(&name)).await,
            "get secrets/{name} must be refused"
        );
    }
    for name in ["spillway-tokens-16", "spillway-tokens-0", "db-password"] {
        assert!(
            !can_i_named(sa, "patch", "", "secrets", Some(ns), Some(name)).await,
            "patch secrets/{name} must be refused"
        );
    }
}
