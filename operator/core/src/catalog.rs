//! Price catalogs: CSV text in the columns of SkyPilot's AWS catalog,
//! `InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone`.
//!
//! Lines starting with `#` are comments; an empty `SpotPrice` means no spot offer. Columns are
//! found by name, so extra columns and another order are fine. Parsing is pure; reading the
//! file is the caller's business.

use std::fmt;

use crate::{CapacityType, GpuModel, Offering};

/// One row of a catalog.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogRow {
    pub instance_type: String,
    pub gpu_model: GpuModel,
    pub gpus: u32,
    pub on_demand: f64,
    pub spot: Option<f64>,
    pub region: String,
    pub zone: String,
}

/// A catalog error, at a 1-based line.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for CatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.line, self.message)
    }
}

const COLUMNS: [&str; 7] = [
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "Price",
    "SpotPrice",
    "Region",
    "AvailabilityZone",
];

/// Parses a catalog. Rows without accelerators are skipped.
///
/// Fields follow RFC 4180 (the `csv` crate): a quoted field may hold commas, quotes and line
/// breaks, as SkyPilot's `GpuInfo` column does. A line is a comment when it starts with `#`.
pub fn parse(text: &str) -> Result<Vec<CatalogRow>, CatalogError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut header: Option<Vec<usize>> = None;
    let mut rows = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        let line_before = reader.position().line() as usize;
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let line = e
                    .position()
                    .map_or(line_before, |p| p.line() as usize)
                    .max(1);
                return Err(CatalogError {
                    line,
                    message: format!("not CSV: {e}"),
                });
            }
        }
        let line = record
            .position()
            .map_or(line_before, |p| p.line() as usize)
            .max(1);
        if record.iter().all(str::is_empty) {
            continue;
        }
        let Some(cols) = &header else {
            let mut idx = Vec::new();
            for want in COLUMNS {
                match record.iter().position(|f| f == want) {
                    Some(p) => idx.push(p),
                    None => {
                        return Err(CatalogError {
                            line,
                            message: format!(
                                "header has no column {want:?} (expected {})",
                                COLUMNS.join(",")
                            ),
                        });
                    }
                }
            }
            header = Some(idx);
            continue;
        };
        let get = |k: usize| record.get(cols[k]).unwrap_or("");
        let err = |message: String| CatalogError { line, message };
        let widest = cols.iter().max().copied().unwrap_or(0);
        if record.len() <= widest {
            return Err(err(format!(
                "expected at least {} fields, found {}",
                widest + 1,
                record.len()
            )));
        }
        let instance_type = get(0).to_string();
        if instance_type.is_empty() {
            return Err(err("empty InstanceType".into()));
        }
        let accel = get(1);
        let count_text = get(2);
        if accel.is_empty() || count_text.is_empty() {
            continue;
        }
        let count: f64 = count_text
            .parse()
            .map_err(|_| err(format!("AcceleratorCount {count_text:?} is not a number")))?;
        if count.is_nan() || count < 1.0 {
            continue;
        }
        let price = |k: usize, name: &str| -> Result<Option<f64>, CatalogError> {
            let t = get(k);
            if t.is_empty() {
                return Ok(None);
            }
            match t.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
                _ => Err(err(format!("{name} {t:?} is not a price in USD per hour"))),
            }
        };
        let on_demand = price(3, "Price")?.ok_or_else(|| err("empty Price".into()))?;
        let spot = price(4, "SpotPrice")?;
        rows.push(CatalogRow {
            instance_type,
            gpu_model: GpuModel::normalize(accel),
            gpus: count as u32,
            on_demand,
            spot,
            region: get(5).to_string(),
            zone: get(6).to_string(),
        });
    }
    if header.is_none() {
        return Err(CatalogError {
            line: 1,
            message: "empty catalog: no header line".into(),
        });
    }
    Ok(rows)
}

/// The offerings of a catalog for one cloud pool: an on-demand and (where priced) a spot
/// offering per row, keeping only `instance_types` if that list is not empty.
pub fn offerings(
    rows: &[CatalogRow],
    pool: &str,
    region: &str,
    instance_types: &[String],
) -> Vec<Offering> {
    let mut out = Vec::new();
    for r in rows {
        if !r.region.is_empty() && r.region != region {
            continue;
        }
        if !instance_types.is_empty()
            && !instance_types
                .iter()
                .any(|t| crate::policy::glob_match(t, &r.instance_type))
        {
            continue;
        }
        let mut push = |capacity_type, price| {
            out.push(Offering {
                pool: pool.to_string(),
                instance_type: r.instance_type.clone(),
                gpu_model: r.gpu_model.clone(),
                gpus: r.gpus,
                capacity_type,
                region: if r.region.is_empty() {
                    region.to_string()
                } else {
                    r.region.clone()
                },
                zone: r.zone.clone(),
                hourly_price: price,
                unavailable_until: None,
                gpu_memory_gib: r.gpu_model.memory_gib().unwrap_or(0.0),
                recent_interruptions: 0,
                efa: Default::default(),
                environment: crate::Environment::Cloud,
                facts: crate::Facts {
                    product: Some(r.gpu_model.as_str().to_string()),
                    gpu_memory_mib: r
                        .gpu_model
                        .memory_gib()
                        .map(|g| (g * 1024.0).round() as u64),
                    ..crate::Facts::default()
                },
            })
        };
        push(CapacityType::OnDemand, r.on_demand);
        if let Some(s) = r.spot {
            push(CapacityType::Spot, s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# comment\nInstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
        p4d.24xlarge,A100,8,96,1152,32.77,12.1,us-east-1,use1-az1\n\
        g5.xlarge,A10G,1,4,16,1.006,,us-east-1,use1-az2\n\
        m5.large,,,2,8,0.096,0.03,us-east-1,use1-az1\n";

    #[test]
    fn parses_rows_and_skips_cpu_only_ones() {
        let rows = parse(SAMPLE).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].gpu_model.as_str(), "A100");
        assert_eq!(rows[0].spot, Some(12.1));
        assert_eq!(rows[1].spot, None);
        let offers = offerings(&rows, "aws", "us-east-1", &[]);
        assert_eq!(offers.len(), 3, "two on-demand, one spot");
        let only_g5 = offerings(&rows, "aws", "us-east-1", &["g5.*".to_string()]);
        assert_eq!(only_g5.len(), 1);
    }

    /// SkyPilot's own `vms.csv` keeps the `GpuInfo` column, a quoted Python dict with commas.
    #[test]
    fn reads_quoted_fields_with_commas_as_skypilot_writes_them() {
        let text = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone\n\
            p4d.24xlarge,A100,8.0,96.0,1152.0,\"{'Gpus': [{'Name': 'A100', 'Manufacturer': 'NVIDIA', 'Count': 8, 'MemoryInfo': {'SizeInMiB': 40960}}], 'TotalGpuMemoryInMiB': 327680}\",32.7726,12.1,us-east-1,us-east-1a\n\
            \"g5.xlarge\",A10G,1.0,4.0,16.0,\"{'Gpus': [{'Name': 'A10G', 'Count': 1}]}\",1.006,,us-east-1,us-east-1b\n";
        let rows = parse(text).unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].instance_type, "p4d.24xlarge");
        assert_eq!(rows[0].gpus, 8);
        assert_eq!(rows[0].on_demand, 32.7726);
        assert_eq!(rows[0].spot, Some(12.1));
        assert_eq!(rows[0].zone, "us-east-1a");
        assert_eq!(rows[1].instance_type, "g5.xlarge");
        assert_eq!(rows[1].spot, None);
        assert_eq!(rows[1].region, "us-east-1");
    }

    #[test]
    fn an_unclosed_quote_is_an_error_or_one_field_never_a_shifted_row() {
        let text = "InstanceType,AcceleratorName,AcceleratorCount,Price,SpotPrice,Region,AvailabilityZone\n\
            p4d.24xlarge,A100,8,\"32.77,12.1,us-east-1,a\n";
        match parse(text) {
            Ok(rows) => assert!(rows.is_empty(), "{rows:?}"),
            Err(e) => assert_eq!(e.line, 2, "{e}"),
        }
    }

    #[test]
    fn errors_name_the_line() {
        let bad = "InstanceType,AcceleratorName,AcceleratorCount,Price,SpotPrice,Region,AvailabilityZone\np4d.24xlarge,A100,8,cheap,,us-east-1,a\n";
        let e = parse(bad).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("cheap"), "{e}");
        let e = parse("Name,Price\n").unwrap_err();
        assert!(e.message.contains("InstanceType"));
    }
}
