//! A cloud pool's offerings as a turn sees them: the price catalog with the provider's
//! instance-type facts and spot prices laid over it, the environment the pool promises (its
//! `aws.environment`, else its image's tags), cool-downs and spot interruptions; and what a
//! listed instance has cost.

use std::sync::Arc;

use kube::ResourceExt;
use spillway_api::ComputePool;
use spillway_cloud::CloudInstance;
use spillway_cloud::facts;
use spillway_core::catalog::CatalogRow;
use spillway_core::{self as core, CapacityType, Time};

use super::{ANY_ZONE, CloudConfig, CloudView};

impl CloudConfig {
    pub(super) fn catalog_row(&self, instance_type: &str, zone: &str) -> Option<&CatalogRow> {
        let rows = || {
            self.catalog
                .iter()
                .filter(move |r| r.instance_type == instance_type)
        };
        rows().find(|r| r.zone == zone).or_else(|| rows().next())
    }

    /// GPUs and hourly price of an instance: the provider's GPU count and its zone's spot
    /// price when known and plausible, else the catalog's.
    pub fn describe(&self, i: &CloudInstance, view: &CloudView) -> (u32, f64) {
        let Some(r) = self.catalog_row(&i.instance_type, &i.zone) else {
            return (0, 0.0);
        };
        let region = view.regions.get(&i.id).and_then(|r| view.facts.get(r));
        let gpus = region
            .and_then(|f| f.types.get(&i.instance_type))
            .map(|t| t.gpus)
            .filter(|g| *g > 0)
            .unwrap_or(r.gpus);
        let price = match i.capacity_type {
            CapacityType::Spot => region
                .and_then(|f| {
                    f.spot.iter().find(|p| {
                        p.instance_type == i.instance_type
                            && p.zone == i.zone
                            && facts::plausible_spot(p.hourly_price, r.on_demand)
                    })
                })
                .map(|p| p.hourly_price)
                .or(r.spot)
                .unwrap_or(r.on_demand),
            CapacityType::OnDemand => r.on_demand,
        };
        (gpus, price)
    }

    /// The offerings of the cloud pools, with capacity cool-downs applied.
    pub fn offerings(
        &self,
        pools: &[Arc<ComputePool>],
        view: &CloudView,
        now: Time,
    ) -> Vec<core::Offering> {
        let mut out = Vec::new();
        for p in pools {
            let Some(aws) = &p.spec.aws else { continue };
            let offers = core::catalog::offerings(
                &self.catalog,
                &p.name_any(),
                &aws.region,
                &aws.instance_types,
            );
            let mut offers = match view.facts.get(&aws.region) {
                Some(f) => facts::apply(offers, f, &aws.availability_zones),
                None => offers,
            };
            offers.retain(|o| {
                aws.capacity_types.is_empty() || aws.capacity_types.contains(&o.capacity_type)
            });
            let promised = promised(p, view);
            let types = view.facts.get(&aws.region).map(|f| &f.types);
            for o in &mut offers {
                let efa_supported = types
                    .and_then(|t| t.get(&o.instance_type))
                    .is_some_and(|t| t.efa_supported == Some(true));
                o.efa = match (aws.efa, efa_supported) {
                    (false, _) => core::Efa::NotAsked,
                    (true, true) => core::Efa::Given,
                    (true, false) => core::Efa::Unsupported,
                };
                o.facts = core::Facts {
                    product: Some(o.gpu_model.as_str().to_string()),
                    gpu_memory_mib: (o.gpu_memory_gib > 0.0)
                        .then(|| (o.gpu_memory_gib * 1024.0).round() as u64),
                    ..promised.clone()
                };
            }
            for o in &mut offers {
                let key = (
                    o.pool.clone(),
                    o.instance_type.clone(),
                    o.capacity_type,
                    o.zone.clone(),
                );
                let any = (key.0.clone(), key.1.clone(), key.2, ANY_ZONE.to_string());
                let until = [view.cooldowns.get(&key), view.cooldowns.get(&any)]
                    .into_iter()
                    .flatten()
                    .filter(|t| **t > now)
                    .max();
                if let Some(until) = until {
                    o.unavailable_until = Some(*until);
                }
            }
            view.spot.apply(&mut offers, now);
            out.extend(offers);
        }
        out
    }
}

/// The driver and CUDA versions a cloud pool's instances come with: its `aws.environment`,
/// and where that says nothing, the tags of its image (`amiId`) as the provider read them.
pub fn promised(pool: &ComputePool, view: &CloudView) -> core::Facts {
    let Some(aws) = &pool.spec.aws else {
        return core::Facts::default();
    };
    let stated = aws
        .environment
        .as_ref()
        .map(|e| e.facts())
        .unwrap_or_default();
    let tagged = aws
        .ami_id
        .as_ref()
        .and_then(|ami| view.facts.get(&aws.region)?.images.get(ami))
        .map(|i| i.facts())
        .unwrap_or_default();
    core::Facts {
        driver: stated.driver.or(tagged.driver),
        cuda: stated.cuda.or(tagged.cuda),
        ..core::Facts::default()
    }
}
