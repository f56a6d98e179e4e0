//! Interconnect topology on the cluster's side (docs/topology.md): a running job's
//! `status.topologyDomain` and a pool's `status.domains` with their free GPUs, from the nodes'
//! domains the world found (`world::node_domains`: the pool's `spec.private.topology.levels`
//! and the nodes' labels).

use std::collections::BTreeMap;

use spillway_api::ComputePool;
use spillway_api::pool::PoolDomain;
use spillway_core as core;

use crate::world::{JobView, Lifecycle};

/// For a running job with `spec.topology`: `<level>=<value>[,<value>...]`, the domains of its
/// level its nodes are in (sorted), if they are in any.
pub fn job_domain(view: &JobView, nodes: &[core::Node]) -> Option<String> {
    let t = view.job.spec.topology.as_ref()?;
    let level = t.required.as_ref().or(t.preferred.as_ref())?;
    let Lifecycle::Running { nodes: on, .. } = &view.lifecycle else {
        return None;
    };
    let mut values: Vec<&str> = Vec::new();
    for name in on {
        // The snapshot's nodes are sorted by name.
        let Ok(i) = nodes.binary_search_by(|n| n.name.as_str().cmp(name)) else {
            continue;
        };
        if let Some(d) = nodes[i].domain(level)
            && !values.contains(&d)
        {
            values.push(d);
        }
    }
    // In name order: the pods' order must not change what is written.
    values.sort_unstable();
    (!values.is_empty()).then(|| format!("{level}={}", values.join(",")))
}

/// The domains of a private pool's topology levels with their free GPUs, by level (outermost
/// first) then name; a level whose every domain is one node (the hostname) is left out.
pub fn pool_domains(pool: &ComputePool, nodes: &[&core::Node]) -> Vec<PoolDomain> {
    let Some(t) = (pool.spec.private.as_ref()).and_then(|p| p.topology.as_ref()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for level in &t.levels {
        let mut of_level: BTreeMap<&str, PoolDomain> = BTreeMap::new();
        for n in nodes {
            let Some(d) = n.domain(level) else { continue };
            let e = of_level.entry(d).or_insert_with(|| PoolDomain {
                domain: format!("{level}={d}"),
                ..PoolDomain::default()
            });
            e.nodes += 1;
            e.capacity += i64::from(n.gpus);
            if n.schedulable {
                e.free += i64::from(n.free_gpus.min(n.gpus));
            }
        }
        if of_level.values().any(|d| d.nodes > 1) {
            out.extend(of_level.into_values());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, rack: &str, free: u32, schedulable: bool) -> core::Node {
        core::Node {
            name: name.into(),
            pool: "onprem".into(),
            gpu_model: None,
            gpus: 8,
            free_gpus: free,
            schedulable,
            releasing_gpus: 0,
            instance_id: None,
            idle_since: None,
            facts: core::Facts::default(),
            domains: vec![
                ("rack".into(), rack.into()),
                ("kubernetes.io/hostname".into(), name.into()),
            ],
        }
    }

    #[test]
    fn a_pools_domains_count_free_gpus_of_ready_nodes_and_leave_out_the_hostname() {
        let pool: ComputePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": "onprem"},
            "spec": {"private": {"nodeSelector": {"a": "b"},
                "topology": {"levels": ["rack", "kubernetes.io/hostname"]}}},
        }))
        .unwrap();
        let nodes = [
            node("a1", "r1", 8, true),
            node("a2", "r1", 3, true),
            node("b1", "r2", 8, false),
        ];
        let refs: Vec<&core::Node> = nodes.iter().collect();
        let got: Vec<(String, i64, i64, i64)> = pool_domains(&pool, &refs)
            .into_iter()
            .map(|d| (d.domain, d.nodes, d.capacity, d.free))
            .collect();
        assert_eq!(
            got,
            [
                ("rack=r1".to_string(), 2, 16, 11),
                ("rack=r2".to_string(), 1, 8, 0)
            ]
        );
    }
}
