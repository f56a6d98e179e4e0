//! [`FastMap`]: the hash map for the names of the world (jobs, nodes, queues, instances).

use std::collections::HashMap;

/// A hash map hashed with foldhash: several times cheaper than SipHash on short names, and,
/// like it, seeded at random per map, so that no fixed list of names collides in every process
/// (in the operator, job names are chosen by users). foldhash does not claim to resist someone
/// who can time the program to learn its seed. Iteration order differs from one map to the
/// next: nothing may depend on it.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
