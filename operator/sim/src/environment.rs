//! The GPUs' environment in the simulated world, so that replays honour jobs' requirements:
//! a private node's facts are its model (as the GPU product) with that model's memory, and the
//! driver and CUDA versions of `--private-environment`; a cloud offering's are its instance
//! type's GPU and memory, with its pool's `spec.aws.environment` (from `--config`) or, for
//! pools that state none, `--cloud-environment`. A simulated instance joins with its
//! offering's facts (what its pool promised holds in the simulator). Other clusters' nodes
//! state none.

use spillway_core::{Facts, GpuModel, PoolKind, Snapshot};

/// `DRIVER/CUDA`, such as `535.104.05/12.2`; either side may be empty (`/12.4`).
pub fn parse(spec: &str) -> Result<Facts, String> {
    let (driver, cuda) = spec.split_once('/').ok_or_else(|| {
        format!("{spec:?}: expected DRIVER/CUDA, such as 535.104.05/12.2 (either may be empty)")
    })?;
    let version = |v: &str, what: &str| {
        let v = v.trim();
        (!v.is_empty())
            .then(|| v.parse().map_err(|e| format!("{spec:?}: {what}: {e}")))
            .transpose()
    };
    let facts = Facts {
        driver: version(driver, "driver")?,
        cuda: version(cuda, "CUDA")?,
        ..Facts::default()
    };
    if facts.is_empty() {
        return Err(format!(
            "{spec:?}: names neither a driver nor a CUDA version"
        ));
    }
    Ok(facts)
}

/// What a GPU model says by itself: its name as the product, its memory.
pub fn of_model(model: Option<&GpuModel>) -> Facts {
    Facts {
        product: model.map(|m| m.as_str().to_string()),
        gpu_memory_mib: model
            .and_then(GpuModel::memory_gib)
            .map(|g| (g * 1024.0).round() as u64),
        ..Facts::default()
    }
}

/// Lays the environments over a built snapshot: `private` on every private node, `cloud` on
/// the offerings of cloud pools whose spec states no driver or CUDA version.
pub fn apply(snap: &mut Snapshot, private: Option<&Facts>, cloud: Option<&Facts>) {
    let private_pools: Vec<String> = snap
        .pools
        .iter()
        .filter(|p| matches!(p.kind, PoolKind::Private { .. }))
        .map(|p| p.name.clone())
        .collect();
    for n in &mut snap.nodes {
        if !private_pools.contains(&n.pool) {
            continue;
        }
        n.facts = Facts {
            driver: private.and_then(|f| f.driver),
            cuda: private.and_then(|f| f.cuda),
            ..of_model(n.gpu_model.as_ref())
        };
    }
    if let Some(cloud) = cloud {
        for o in &mut snap.offerings {
            if o.facts.driver.is_none() && o.facts.cuda.is_none() {
                o.facts.driver = cloud.driver;
                o.facts.cuda = cloud.cuda;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_and_cuda_parse_and_bad_ones_are_named() {
        let f = parse("535.104.05/12.2").unwrap();
        assert_eq!(f.driver.unwrap().to_string(), "535.104.05");
        assert_eq!(f.cuda.unwrap().to_string(), "12.2");
        let f = parse("/12.4").unwrap();
        assert!(f.driver.is_none());
        assert!(parse("12.4").unwrap_err().contains("expected DRIVER/CUDA"));
        assert!(parse("/").unwrap_err().contains("neither"));
        assert!(parse("535.x/12.2").unwrap_err().contains("driver"));
    }
}
