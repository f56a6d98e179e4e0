//! How a launched machine joins the cluster: a bootstrap token made for the launch (a
//! `bootstrap.kubernetes.io/token` Secret in `kube-system` that expires at the join timeout;
//! the operator only creates it, and Kubernetes' token cleaner deletes it once expired), and
//! user data rendered from the pool's template or Spillway's kubelet bootstrap script.

use std::collections::BTreeMap;
use std::io::Read;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use spillway_api::ComputePool;
use spillway_core::Time;

use crate::labels;

/// Where joining machines find the API server.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinConfig {
    /// The API server URL machines reach (`https://...`).
    pub api_server: String,
    /// The cluster CA, PEM.
    pub ca_pem: String,
}

/// Label on Spillway's bootstrap token Secrets.
pub const TOKEN_LABEL: &str = "spillway.io/bootstrap";
/// Annotation naming the need a token was made for.
pub const NEED_ANNOTATION: &str = "spillway.io/need";

/// Spillway's default user data: writes the CA and a bootstrap kubeconfig, and starts the
/// kubelet with TLS bootstrapping, the pool's labels and taints, and the instance id label.
pub const DEFAULT_USER_DATA: &str = r#"#!/bin/bash
# Spillway node bootstrap for pool {{pool}} of cluster {{cluster}} (see docs/aws.md).
set -euo pipefail
IMDS=http://169.254.169.254/latest
IMDS_TOKEN=$(curl -sfX PUT "$IMDS/api/token" -H "X-aws-ec2-metadata-token-ttl-seconds: 300")
INSTANCE_ID=$(curl -sf -H "X-aws-ec2-metadata-token: $IMDS_TOKEN" "$IMDS/meta-data/instance-id")
mkdir -p /etc/kubernetes/pki /etc/systemd/system/kubelet.service.d
echo '{{caData}}' | base64 -d > /etc/kubernetes/pki/ca.crt
cat > /etc/kubernetes/bootstrap-kubelet.conf <<'SPILLWAY_KUBECONFIG'
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster: {certificate-authority: /etc/kubernetes/pki/ca.crt, server: '{{apiServer}}'}
users:
- name: bootstrap
  user: {token: '{{token}}'}
contexts:
- name: bootstrap
  context: {cluster: cluster, user: bootstrap}
current-context: bootstrap
SPILLWAY_KUBECONFIG
cat > /etc/systemd/system/kubelet.service.d/20-spillway.conf <<SPILLWAY_UNIT
[Service]
Environment="KUBELET_EXTRA_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf --node-labels={{nodeLabels}},spillway.io/instance-id=$INSTANCE_ID --register-with-taints={{nodeTaints}}"
SPILLWAY_UNIT
systemctl daemon-reload
systemctl enable --now kubelet
"#;

/// A bootstrap token: `ID.SECRET`.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub id: String,
    pub secret: String,
}

impl Token {
    /// A new random token (from the system's random source).
    pub fn generate() -> std::io::Result<Token> {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let mut bytes = [0u8; 22];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        let text: String = bytes
            .iter()
            .map(|b| ALPHABET[(*b as usize) % ALPHABET.len()] as char)
            .collect();
        Ok(Token {
            id: text[..6].to_string(),
            secret: text[6..].to_string(),
        })
    }

    pub fn value(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    pub fn secret_name(&self) -> String {
        format!("bootstrap-token-{}", self.id)
    }
}

fn rfc3339(t: Time) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(t.as_millis())
        .map(|ts| ts.to_string())
        .unwrap_or_default()
}

/// The Secret that makes `token` valid for node bootstrapping until `expires`.
pub fn token_secret(token: &Token, need: &str, expires: Time) -> Secret {
    let data: BTreeMap<String, ByteString> = [
        ("token-id", token.id.clone()),
        ("token-secret", token.secret.clone()),
        ("expiration", rfc3339(expires)),
        ("usage-bootstrap-authentication", "true".to_string()),
        ("usage-bootstrap-signing", "true".to_string()),
        (
            "auth-extra-groups",
            "system:bootstrappers:spillway".to_string(),
        ),
        (
            "description",
            format!("Spillway: joins the instances of need {need}"),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(token.secret_name()),
            namespace: Some("kube-system".into()),
            labels: Some([(TOKEN_LABEL.to_string(), "true".to_string())].into()),
            annotations: Some([(NEED_ANNOTATION.to_string(), need.to_string())].into()),
            ..ObjectMeta::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// `key=value,...` for the kubelet's `--node-labels`: the pool label, the GPU model, and the
/// pool's `nodeLabels`.
pub fn node_labels(pool: &ComputePool, gpu_model: &str) -> String {
    let mut all: BTreeMap<String, String> = pool.spec.node_labels.clone();
    all.insert(labels::POOL_LABEL.into(), pool.name_any());
    if !gpu_model.is_empty() {
        all.insert(labels::GPU_MODEL_LABEL.into(), gpu_model.to_string());
    }
    all.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `key=value:Effect,...` for the kubelet's `--register-with-taints`.
pub fn node_taints(pool: &ComputePool) -> String {
    pool.spec
        .node_taints
        .iter()
        .map(|t| {
            format!(
                "{}={}:{}",
                t.key,
                t.value.clone().unwrap_or_default(),
                t.effect
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether a pool's launches get user data (and so a token): a pool with its own template,
/// or an AMI pool (Spillway's script). A launch-template pool keeps the template's user data.
pub fn needs_token(pool: &ComputePool) -> bool {
    pool.spec
        .aws
        .as_ref()
        .is_some_and(|a| a.user_data.is_some() || a.ami_id.is_some())
}

/// The user data for one launch, if the pool gets any.
pub fn user_data(
    pool: &ComputePool,
    join: &JoinConfig,
    token: &Token,
    cluster: &str,
    gpu_model: &str,
) -> Option<String> {
    let aws = pool.spec.aws.as_ref()?;
    let template = match (&aws.user_data, &aws.ami_id) {
        (Some(t), _) => t.as_str(),
        (None, Some(_)) => DEFAULT_USER_DATA,
        (None, None) => return None,
    };
    let vars = [
        ("{{apiServer}}", join.api_server.clone()),
        ("{{caData}}", BASE64.encode(join.ca_pem.as_bytes())),
        ("{{token}}", token.value()),
        ("{{nodeLabels}}", node_labels(pool, gpu_model)),
        ("{{nodeTaints}}", node_taints(pool)),
        ("{{pool}}", pool.name_any()),
        ("{{cluster}}", cluster.to_string()),
    ];
    let mut out = template.to_string();
    for (k, v) in vars {
        out = out.replace(k, &v);
    }
    Some(out)
}

/// PEM for DER certificates.
pub fn pem(ders: &[Vec<u8>]) -> String {
    let mut out = String::new();
    for der in ders {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let b64 = BASE64.encode(der);
        for chunk in b64.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(chunk));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_have_the_bootstrap_format() {
        let t = Token::generate().unwrap();
        assert_eq!(t.id.len(), 6);
        assert_eq!(t.secret.len(), 16);
        assert!(
            t.value()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.')
        );
        assert_ne!(t, Token::generate().unwrap());
        let s = token_secret(&t, "ns/j#0", Time::from_millis(0));
        assert_eq!(s.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
        assert_eq!(s.metadata.name, Some(format!("bootstrap-token-{}", t.id)));
    }

    #[test]
    fn user_data_renders_the_template() {
        let pool: ComputePool = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "aws"},
            "spec": {"aws": {"region": "us-east-1", "amiId": "ami-1", "instanceTypes": ["g6.xlarge"]},
                     "nodeLabels": {"team": "ml"},
                     "nodeTaints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]},
        }))
        .unwrap();
        let join = JoinConfig {
            api_server: "https://10.0.0.1:6443".into(),
            ca_pem: "PEM".into(),
        };
        let t = Token {
            id: "abcdef".into(),
            secret: "0123456789abcdef".into(),
        };
        let ud = user_data(&pool, &join, &t, "prod", "L4").unwrap();
        assert!(ud.contains("server: 'https://10.0.0.1:6443'"));
        assert!(ud.contains("token: 'abcdef.0123456789abcdef'"));
        assert!(
            ud.contains("--node-labels=spillway.io/gpu-model=L4,spillway.io/pool=aws,team=ml,")
        );
        assert!(ud.contains("--register-with-taints=gpu=yes:NoSchedule"));
        assert!(!ud.contains("{{"));
    }
}
