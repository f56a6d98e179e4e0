//! Whether a job's pods may run in another cluster (a ComputePool with `spec.cluster`).
//!
//! A pod there runs in a namespace the home operator shares with other teams' jobs (and, with
//! several home clusters, with other clusters' jobs). Its template may therefore name nothing of
//! that namespace: no Secret (as a volume, a projected source, an environment variable,
//! `envFrom` or an image pull Secret), no ServiceAccount token, no host path (which reaches the kubelet's copies of
//! every pod's Secrets on the node) and no CSI volume (a secrets-store driver reads that
//! cluster's credentials). Its ServiceAccount is not carried there: the pod runs as that
//! namespace's `default`, with no token mounted, and Spillway gives it its own identity token
//! (whose subject still names the home ServiceAccount).

use k8s_openapi::api::core::v1::{Container, EnvFromSource, EnvVar, PodSpec, Volume};

/// Why pods of this template cannot run in another cluster, naming the first field that
/// keeps them home; `None` when they can.
pub fn problem(spec: Option<&PodSpec>) -> Option<String> {
    let spec = spec?;
    let at = "spec.template.spec";
    if let Some(s) = spec.image_pull_secrets.iter().flatten().next() {
        return Some(format!(
            "{at}.imagePullSecrets[0] ({}): a Secret of its namespace (there, another team's could be used)",
            s.name
        ));
    }
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if let Some(why) = volume_problem(v) {
            return Some(format!("{at}.volumes[{i}] ({}): {why}", v.name));
        }
    }
    let containers = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
        ("containers", spec.containers.as_slice()),
    ];
    for (kind, list) in containers {
        for (i, c) in list.iter().enumerate() {
            if let Some(why) = container_problem(c) {
                return Some(format!("{at}.{kind}[{i}] ({}): {why}", c.name));
            }
        }
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let env = c.env.as_deref().unwrap_or_default();
        let from = c.env_from.as_deref().unwrap_or_default();
        if let Some(why) = env_problem(env, from) {
            return Some(format!("{at}.ephemeralContainers[{i}] ({}): {why}", c.name));
        }
    }
    None
}

fn volume_problem(v: &Volume) -> Option<&'static str> {
    if v.secret.is_some() {
        return Some("a Secret volume");
    }
    if v.host_path.is_some() {
        return Some("a hostPath volume");
    }
    if v.csi.is_some() {
        return Some("a CSI volume");
    }
    let sources = v.projected.as_ref().and_then(|p| p.sources.as_ref());
    for s in sources.into_iter().flatten() {
        if s.secret.is_some() {
            return Some("a projected Secret");
        }
        if s.service_account_token.is_some() {
            return Some("a projected ServiceAccount token");
        }
    }
    None
}

fn container_problem(c: &Container) -> Option<&'static str> {
    env_problem(
        c.env.as_deref().unwrap_or_default(),
        c.env_from.as_deref().unwrap_or_default(),
    )
}

fn env_problem(env: &[EnvVar], from: &[EnvFromSource]) -> Option<&'static str> {
    if env.iter().any(|e| {
        e.value_from
            .as_ref()
            .is_some_and(|f| f.secret_key_ref.is_some())
    }) {
        return Some("an environment variable from a Secret");
    }
    if from.iter().any(|f| f.secret_ref.is_some()) {
        return Some("envFrom a Secret");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_plain_template_runs_anywhere() {
        let s = spec(json!({"containers": [{"name": "t", "image": "x",
            "env": [{"name": "A", "value": "1"}],
            "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {}},
                        {"name": "cfg", "configMap": {"name": "c"}}],
            "serviceAccountName": "trainer"}));
        assert_eq!(problem(Some(&s)), None);
    }

    #[test]
    fn anything_naming_a_secret_a_token_or_the_host_stays_home() {
        let cases = [
            (
                json!({"volumes": [{"name": "v", "secret": {"secretName": "spillway-tokens"}}]}),
                "volumes[0] (v): a Secret volume",
            ),
            (
                json!({"volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}),
                "projected ServiceAccount token",
            ),
            (
                json!({"volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "s"}}]}}]}),
                "projected Secret",
            ),
            (
                json!({"volumes": [{"name": "v", "hostPath": {"path": "/var/lib/kubelet"}}]}),
                "hostPath",
            ),
            (
                json!({"volumes": [{"name": "v", "csi": {"driver": "secrets-store.csi.k8s.io"}}]}),
                "CSI",
            ),
            (
                json!({"imagePullSecrets": [{"name": "registry"}]}),
                "imagePullSecrets[0] (registry): a Secret of its namespace",
            ),
        ];
        for (extra, want) in cases {
            let mut v = json!({"containers": [{"name": "t", "image": "x"}]});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            let got = problem(Some(&spec(v))).unwrap_or_default();
            assert!(got.contains(want), "{want}: {got}");
        }
        let env = spec(json!({"containers": [{"name": "t", "image": "x",
            "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}));
        assert!(
            problem(Some(&env))
                .unwrap()
                .contains("containers[0] (t): an environment variable from a Secret")
        );
        let from = spec(json!({"containers": [{"name": "t", "image": "x"}],
            "initContainers": [{"name": "i", "image": "x", "envFrom": [{"secretRef": {"name": "s"}}]}]}));
        assert!(
            problem(Some(&from))
                .unwrap()
                .contains("initContainers[0] (i): envFrom a Secret")
        );
    }
}
