//! `spillway simulate --private-topology RACKSxNODES`: the private nodes in racks, and every
//! gang of more than one replica bound to one rack (`spec.topology.required`). What that costs
//! the gangs, against a replay that ignores racks, is [`crate::report::summarize_topology`].

use spillway_core::{Job, Snapshot, TopologyWish};

/// The level racks are labelled on.
pub const LEVEL: &str = "spillway.io/rack";

/// Racks of private nodes: `RACKSxNODES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Racks {
    pub racks: u32,
    pub nodes_per_rack: u32,
}

impl std::str::FromStr for Racks {
    type Err = String;

    fn from_str(s: &str) -> Result<Racks, String> {
        let bad = || format!("{s:?} is not RACKSxNODES (racks of nodes each, such as 4x2)");
        let (r, n) = s.split_once('x').ok_or_else(bad)?;
        let racks: u32 = r.trim().parse().map_err(|_| bad())?;
        let nodes_per_rack: u32 = n.trim().parse().map_err(|_| bad())?;
        if racks == 0 || nodes_per_rack == 0 {
            return Err(bad());
        }
        Ok(Racks {
            racks,
            nodes_per_rack,
        })
    }
}

impl std::fmt::Display for Racks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.racks, self.nodes_per_rack)
    }
}

/// Puts the private nodes, in inventory order, into racks `rack-0`, `rack-1`, ... of
/// `nodes_per_rack` nodes each. The racks must hold exactly the private nodes.
pub fn apply(snap: &mut Snapshot, racks: Racks) -> Result<(), String> {
    let private: Vec<usize> = snap
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.instance_id.is_none())
        .filter(|(_, n)| {
            snap.pools.iter().any(|p| {
                p.name == n.pool && matches!(p.kind, spillway_core::PoolKind::Private { .. })
            })
        })
        .map(|(i, _)| i)
        .collect();
    let want = racks.racks as usize * racks.nodes_per_rack as usize;
    if private.len() != want {
        return Err(format!(
            "--private-topology {racks} puts {want} nodes in racks; the private inventory has {}",
            private.len()
        ));
    }
    for (k, i) in private.into_iter().enumerate() {
        let rack = k / racks.nodes_per_rack as usize;
        snap.nodes[i].domains = vec![(LEVEL.to_string(), format!("rack-{rack}"))];
    }
    Ok(())
}

/// The wish of a bound gang.
pub fn wish() -> TopologyWish {
    TopologyWish {
        level: LEVEL.to_string(),
        required: true,
    }
}

/// Whether a waiting gang is held back by its rack alone: the private nodes' free GPUs hold
/// all of its replicas, but no one rack's do.
pub fn held_by_racks(snap: &Snapshot, job: &Job) -> bool {
    let g = job.gpus_per_replica.max(1);
    let mut across = 0u32;
    let mut per_rack: Vec<(&str, u32)> = Vec::new();
    for n in &snap.nodes {
        let Some(rack) = n.domain(LEVEL) else {
            continue;
        };
        if !n.schedulable || !job.accepts_node(n) {
            continue;
        }
        let fits = n.free_gpus / g;
        across += fits;
        match per_rack.iter_mut().find(|(r, _)| *r == rack) {
            Some((_, k)) => *k += fits,
            None => per_rack.push((rack, fits)),
        }
    }
    let want = job.replicas.max(1);
    across >= want && per_rack.iter().all(|(_, k)| *k < want)
}

/// How many racks the nodes span (nodes in no rack, such as cloud nodes, not counted).
pub fn racks_spanned<'a>(snap: &Snapshot, nodes: impl Iterator<Item = &'a String>) -> u32 {
    let mut seen: Vec<&str> = Vec::new();
    for name in nodes {
        if let Some(rack) = snap
            .nodes
            .iter()
            .find(|n| &n.name == name)
            .and_then(|n| n.domain(LEVEL))
            && !seen.contains(&rack)
        {
            seen.push(rack);
        }
    }
    seen.len() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn racks_parse_and_say_what_is_wrong() {
        assert_eq!(
            "4x2".parse::<Racks>(),
            Ok(Racks {
                racks: 4,
                nodes_per_rack: 2
            })
        );
        for bad in ["4", "0x2", "4x0", "axb", "4x2x1"] {
            let e = bad.parse::<Racks>().expect_err(bad);
            assert!(e.contains("RACKSxNODES"), "{e}");
        }
    }
}
