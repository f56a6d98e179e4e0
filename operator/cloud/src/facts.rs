//! What the provider says about instance types and spot prices, laid over the price catalog.
//!
//! The catalog (bundled or `--catalog`) is the base: it has the on-demand prices (EC2 has no
//! API for them short of the Pricing service) and a GPU table for every type it lists. The
//! provider's answers win where they are believable:
//! - GPU count, model and memory from `DescribeInstanceTypes` replace the catalog's for types
//!   it reports GPUs for;
//! - spot prices from `DescribeSpotPriceHistory` replace the catalog's spot offerings of a type
//!   with one offering per zone that sells it, when at least one price is plausible
//!   ([`plausible_spot`]); otherwise the catalog's spot price stays.

use std::collections::HashMap;

use spillway_core::{CapacityType, GpuModel, Offering};

use crate::{InstanceTypeInfo, SpotPrice};

/// A spot price below this fraction of the on-demand price is not believed (EC2's deepest
/// discounts are about 90%; moto answers a placeholder of $0.00001).
pub const MIN_SPOT_FRACTION: f64 = 0.05;

/// Whether an API spot price can be used next to this on-demand price.
pub fn plausible_spot(price: f64, on_demand: f64) -> bool {
    price.is_finite() && price > 0.0 && price >= on_demand * MIN_SPOT_FRACTION
}

/// Facts a provider reported for one region.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RegionFacts {
    pub types: HashMap<String, InstanceTypeInfo>,
    pub spot: Vec<SpotPrice>,
    /// The pools' machine images, by id.
    pub images: HashMap<String, crate::ImageInfo>,
}

/// `offers` (one pool's, from the catalog) with the provider's facts applied. `zones`, when not
/// empty, limits the spot offerings made from API prices to those zones.
pub fn apply(offers: Vec<Offering>, facts: &RegionFacts, zones: &[String]) -> Vec<Offering> {
    let mut out: Vec<Offering> = Vec::with_capacity(offers.len());
    let mut replaced_spot: Vec<String> = Vec::new();
    for mut o in offers {
        if let Some(info) = facts.types.get(&o.instance_type).filter(|i| i.gpus > 0) {
            o.gpus = info.gpus;
            o.gpu_model = GpuModel::from_provider(&info.gpu_model, info.gpu_memory_mib);
            o.gpu_memory_gib = if info.gpu_memory_mib > 0 {
                info.gpu_memory_mib as f64 / 1024.0
            } else {
                o.gpu_model.memory_gib().unwrap_or(o.gpu_memory_gib)
            };
        }
        if o.capacity_type == CapacityType::OnDemand && !replaced_spot.contains(&o.instance_type) {
            let prices: Vec<&SpotPrice> = facts
                .spot
                .iter()
                .filter(|p| p.instance_type == o.instance_type)
                .filter(|p| plausible_spot(p.hourly_price, o.hourly_price))
                .filter(|p| zones.is_empty() || zones.contains(&p.zone))
                .collect();
            if !prices.is_empty() {
                replaced_spot.push(o.instance_type.clone());
                for p in prices {
                    let mut spot = o.clone();
                    spot.capacity_type = CapacityType::Spot;
                    spot.zone = p.zone.clone();
                    spot.hourly_price = p.hourly_price;
                    out.push(spot);
                }
            }
        }
        out.push(o);
    }
    // The catalog's spot offerings of types priced by the API go.
    out.retain(|o| {
        o.capacity_type != CapacityType::Spot
            || !replaced_spot.contains(&o.instance_type)
            || facts
                .spot
                .iter()
                .any(|p| p.instance_type == o.instance_type && p.zone == o.zone)
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::Time;

    fn catalog() -> Vec<Offering> {
        let rows = spillway_core::catalog::parse(
            "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
             g5.xlarge,A10G,1,4,16,1.006,0.45,us-east-1,use1-az1\n\
             p4de.24xlarge,A100,8,96,1152,40.96,,us-east-1,use1-az2\n",
        )
        .unwrap();
        spillway_core::catalog::offerings(&rows, "aws", "us-east-1", &[])
    }

    fn price(t: &str, zone: &str, p: f64) -> SpotPrice {
        SpotPrice {
            instance_type: t.into(),
            zone: zone.into(),
            hourly_price: p,
            at: Time::from_millis(0),
        }
    }

    #[test]
    fn without_facts_the_catalog_stands() {
        let offers = catalog();
        assert_eq!(apply(offers.clone(), &RegionFacts::default(), &[]), offers);
        assert_eq!(offers[0].gpu_memory_gib, 24.0, "from the built-in table");
    }

    #[test]
    fn provider_gpu_facts_win() {
        let mut facts = RegionFacts::default();
        facts.types.insert(
            "p4de.24xlarge".into(),
            InstanceTypeInfo {
                instance_type: "p4de.24xlarge".into(),
                gpus: 8,
                gpu_model: "A100".into(),
                gpu_memory_mib: 81920,
                efa_supported: Some(true),
            },
        );
        let out = apply(catalog(), &facts, &[]);
        let p4de = out
            .iter()
            .find(|o| o.instance_type == "p4de.24xlarge")
            .unwrap();
        assert_eq!(p4de.gpu_model.as_str(), "A100-80GB");
        assert_eq!(p4de.gpu_memory_gib, 80.0);
    }

    #[test]
    fn plausible_api_spot_prices_replace_the_catalogs_per_zone() {
        let facts = RegionFacts {
            types: HashMap::new(),
            spot: vec![
                price("g5.xlarge", "us-east-1a", 0.39),
                price("g5.xlarge", "us-east-1b", 0.41),
                price("g5.xlarge", "us-east-1c", 0.00001),
                price("p4de.24xlarge", "us-east-1a", 12.5),
            ],
            images: HashMap::new(),
        };
        let out = apply(catalog(), &facts, &[]);
        let spot: Vec<(&str, &str, f64)> = out
            .iter()
            .filter(|o| o.capacity_type == CapacityType::Spot)
            .map(|o| (o.instance_type.as_str(), o.zone.as_str(), o.hourly_price))
            .collect();
        assert_eq!(
            spot,
            vec![
                ("g5.xlarge", "us-east-1a", 0.39),
                ("g5.xlarge", "us-east-1b", 0.41),
                ("p4de.24xlarge", "us-east-1a", 12.5),
            ],
            "the placeholder price is dropped, the catalog's use1-az1 spot row replaced"
        );
        let only_b = apply(catalog(), &facts, &["us-east-1b".to_string()]);
        assert_eq!(
            only_b
                .iter()
                .filter(|o| o.capacity_type == CapacityType::Spot)
                .count(),
            1
        );
    }

    #[test]
    fn implausible_api_prices_keep_the_catalogs() {
        let facts = RegionFacts {
            types: HashMap::new(),
            spot: vec![price("g5.xlarge", "us-east-1a", 0.00001)],
            images: HashMap::new(),
        };
        let out = apply(catalog(), &facts, &[]);
        let spot: Vec<f64> = out
            .iter()
            .filter(|o| o.capacity_type == CapacityType::Spot)
            .map(|o| o.hourly_price)
            .collect();
        assert_eq!(spot, vec![0.45]);
        assert!(!plausible_spot(0.00001, 1.006));
        assert!(!plausible_spot(f64::NAN, 1.0));
        assert!(plausible_spot(0.3, 1.006));
    }
}
