//! Names to their indexes in the snapshot (nodes, queues, pools), for one cycle.
//!
//! A cycle looks a node up by name for every node of every running job (their expected ends
//! become the profile's releases): on the synthetic replays that was a sixth of the time, about
//! 195 instructions per lookup in the general-purpose map. This table is built for exactly
//! that (about 117): open addressing over a power-of-two table, each slot keeping the name's
//! whole 64-bit hash beside its index, so that names are compared only when their hashes are
//! equal (once per lookup that finds its node), and a hash that reads names eight bytes at a
//! time. Its slots are one plain buffer, which the caller's [`super::Scratch`] keeps from one
//! cycle to the next (queues and pools are looked up through the same table).

use crate::{Node, Pool, Queue};

const EMPTY: u32 = u32::MAX;

/// Something a snapshot lists by a unique name.
pub(super) trait Named {
    fn name(&self) -> &str;
}

impl Named for Node {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for Queue {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for Pool {
    fn name(&self) -> &str {
        &self.name
    }
}

/// Name -> index into a slice of the snapshot.
pub(super) struct Names<'a, T> {
    items: &'a [T],
    /// (hash, index) per slot; index `EMPTY` for a free slot.
    slots: Vec<(u64, u32)>,
    mask: usize,
}

/// Node name -> index into the snapshot's nodes.
pub(super) type NodeNames<'a> = Names<'a, Node>;

impl<'a, T: Named> Names<'a, T> {
    #[cfg(test)]
    pub(super) fn new(items: &'a [T]) -> Names<'a, T> {
        Names::new_in(items, Vec::new())
    }

    /// The table of `items`, built in `slots` (a buffer kept from an earlier table, cleared
    /// here; its allocation is reused when it is large enough).
    pub(super) fn new_in(items: &'a [T], slots: Vec<(u64, u32)>) -> Names<'a, T> {
        // At most half full: probes stay short.
        let size = (2 * items.len()).next_power_of_two().max(8);
        let mut slots = slots;
        slots.clear();
        slots.resize(size, (0, EMPTY));
        let mut names = Names {
            items,
            slots,
            mask: size - 1,
        };
        for (i, item) in items.iter().enumerate() {
            let name = item.name();
            let h = hash(name.as_bytes());
            let s = names.probe(h, name);
            // A name given twice keeps its last item, as a map built by inserting in order does.
            names.slots[s] = (h, i as u32);
        }
        names
    }

    /// The index of the item named `name`.
    pub(super) fn get(&self, name: &str) -> Option<usize> {
        let (_, i) = self.slots[self.probe(hash(name.as_bytes()), name)];
        (i != EMPTY).then_some(i as usize)
    }

    /// The item named `name`.
    pub(super) fn item(&self, name: &str) -> Option<&'a T> {
        let items = self.items;
        self.get(name).map(|i| &items[i])
    }

    /// Its slots, for the next table to be built in.
    pub(super) fn into_slots(self) -> Vec<(u64, u32)> {
        self.slots
    }

    /// The slot holding `name`, or the free slot where it would go.
    fn probe(&self, h: u64, name: &str) -> usize {
        let mut s = (h as usize) & self.mask;
        loop {
            let (sh, i) = self.slots[s];
            if i == EMPTY || (sh == h && self.items[i as usize].name() == name) {
                return s;
            }
            s = (s + 1) & self.mask;
        }
    }
}

/// Eight bytes at a time (a name of 8 bytes or more ends with its last eight, overlapping the
/// word before; a shorter one is one word), the length mixed in first; then every bit is
/// spread over the low ones, which pick the slot (names that differ only in their last
/// characters, "private-12" and "private-13", must not share slots).
fn hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(29);
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let n = bytes.len();
    let mut h = (n as u64).wrapping_mul(K);
    if n >= 8 {
        let mut at = 0;
        while at + 8 < n {
            h = mix(h, word(at));
            at += 8;
        }
        h = mix(h, word(n - 8));
    } else {
        let w = bytes
            .iter()
            .enumerate()
            .fold(0u64, |w, (i, &b)| w | u64::from(b) << (8 * i));
        h = mix(h, w);
    }
    let h = (h ^ (h >> 32)).wrapping_mul(K);
    h ^ (h >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Node {
        Node {
            facts: Default::default(),
            name: name.into(),
            pool: "p".into(),
            gpu_model: None,
            gpus: 8,
            free_gpus: 8,
            schedulable: true,
            releasing_gpus: 0,
            instance_id: None,
            idle_since: None,
            domains: Vec::new(),
        }
    }

    proptest::proptest! {
        /// Finds what a map built by inserting every name in order finds, for names of every
        /// length (a shared prefix, words and remainders of all sizes), duplicates included,
        /// also when built in the slots an earlier table left.
        #[test]
        fn finds_what_a_map_finds(
            names in proptest::collection::vec("(private-|c)?[a-z0-9.-]{0,20}", 0..60),
            asked in proptest::collection::vec("(private-|c)?[a-z0-9.-]{0,20}", 0..20),
        ) {
            let nodes: Vec<Node> = names.iter().map(|n| node(n)).collect();
            let map: std::collections::HashMap<&str, usize> =
                nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
            let table = NodeNames::new(&nodes);
            // Built again in the slots of a table of other names (larger or smaller).
            let others: Vec<Node> = asked.iter().map(|n| node(n)).collect();
            let reused = NodeNames::new_in(&nodes, NodeNames::new(&others).into_slots());
            for name in names.iter().chain(&asked) {
                proptest::prop_assert_eq!(table.get(name), map.get(name.as_str()).copied());
                proptest::prop_assert_eq!(reused.get(name), table.get(name));
            }
        }
    }

    /// Names that differ only at their end spread over the table: each is found within a few
    /// slots of where its hash points (a table at most half full averages under two).
    #[test]
    fn similar_names_spread_over_the_table() {
        for names in [
            (0..32).map(|i| format!("private-{i}")).collect::<Vec<_>>(),
            (0..10_000).map(|i| format!("node-{i:05}")).collect(),
            (0..1_000).map(|i| i.to_string()).collect(),
        ] {
            let nodes: Vec<Node> = names.iter().map(|n| node(n)).collect();
            let table = NodeNames::new(&nodes);
            let probes: usize = names
                .iter()
                .map(|n| {
                    let h = hash(n.as_bytes());
                    let home = (h as usize) & table.mask;
                    (table.probe(h, n).wrapping_sub(home) & table.mask) + 1
                })
                .sum();
            let mean = probes as f64 / names.len() as f64;
            assert!(
                mean < 2.0,
                "{} names like {:?}: {mean:.2} probes on average",
                names.len(),
                names[0]
            );
        }
    }

    #[test]
    fn an_empty_table_finds_nothing() {
        assert_eq!(NodeNames::new(&[]).get("private-0"), None);
        assert_eq!(NodeNames::new(&[node("a")]).get(""), None);
        assert_eq!(NodeNames::new(&[node("")]).get(""), Some(0));
    }
}
