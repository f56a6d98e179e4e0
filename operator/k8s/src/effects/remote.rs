//! The effects in other clusters that create or delete one object: a job's pods there and a
//! labelled Job's copy (`turn/dispatch.rs`).

use std::fmt::Debug;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::KubeEffects;
use crate::error::Error;
use crate::executor::Fence;
use crate::labels;

impl KubeEffects {
    /// Creates a pod in another cluster. A pod of that name there already is this one when it
    /// carries the same job uid, home cluster, attempt and replica (made before a restart);
    /// anything else is refused, not taken for it.
    pub(super) async fn create_remote_pod(
        &self,
        client: &Client,
        pod: &Pod,
        fence: &Fence,
    ) -> Result<(), Error> {
        let same = [
            labels::JOB_UID_LABEL,
            labels::HOME_CLUSTER_LABEL,
            labels::ATTEMPT_LABEL,
            labels::REPLICA_LABEL,
        ];
        self.create_there(client, pod, &same, ("pod", "this replica's"), fence)
            .await
    }

    /// Creates a workload's copy in another cluster. A Job of that name there already is this
    /// copy when it carries the same job uid, home cluster and attempt (made before a
    /// restart); anything else is refused, not taken for it.
    pub(super) async fn create_remote_copy(
        &self,
        client: &Client,
        copy: &Job,
        fence: &Fence,
    ) -> Result<(), Error> {
        let same = [
            labels::JOB_UID_LABEL,
            labels::HOME_CLUSTER_LABEL,
            labels::ATTEMPT_LABEL,
        ];
        self.create_there(client, copy, &same, ("job", "this job's copy"), fence)
            .await
    }

    /// Creates `object` in its namespace of another cluster; an object of that name there
    /// already counts as created when the labels `same` say it is this one. `(kind, whose)`
    /// name it in metrics and errors.
    async fn create_there<K>(
        &self,
        client: &Client,
        object: &K,
        same: &[&str],
        (kind, whose): (&'static str, &str),
        fence: &Fence,
    ) -> Result<(), Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let namespace = object.meta().namespace.as_deref().unwrap_or_default();
        let name = object.meta().name.as_deref().unwrap_or_default();
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        let params = PostParams {
            field_manager: Some(labels::FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        fence.check()?;
        match api.create(&params, object).await {
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                fence.check()?;
                let there = api.get(name).await.map_err(Error::Kube)?;
                let same = same
                    .iter()
                    .all(|k| there.labels().get(*k) == object.labels().get(*k));
                self.metrics.api_write(kind, same);
                if same {
                    Ok(())
                } else {
                    Err(Error::Taken(format!(
                        "{kind} {namespace}/{name} exists there and is not {whose}"
                    )))
                }
            }
            r => self.wrote(kind, r, &[]),
        }
    }

    /// Deletes a workload's copy in another cluster if it is still the one with `uid`, its
    /// pods first (that cluster's garbage collector deletes them, each with its own grace
    /// period, and the copy shows until they are gone: the job is not placed again before);
    /// gone already is done.
    pub(super) async fn delete_remote_copy(
        &self,
        client: &Client,
        (namespace, name, uid): (&str, &str, &str),
        fence: &Fence,
    ) -> Result<(), Error> {
        let api: Api<Job> = Api::namespaced(client.clone(), namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::foreground()
        };
        fence.check()?;
        // 404: gone already; 409: another object of that name now (not this copy).
        self.wrote("job", api.delete(name, &params).await, &[404, 409])
    }
}
