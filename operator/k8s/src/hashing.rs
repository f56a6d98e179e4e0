//! The maps and sets the loop keys by object names and ids (jobs, pods, nodes, queues):
//! std's `HashMap` and `HashSet` with foldhash's hasher instead of SipHash.
//!
//! A quiet turn at 10,000 jobs looks up some 70,000 names; with SipHash, hashing them was
//! over a third of the turn (docs/performance.md). foldhash is seeded at random per map, as
//! SipHash is, so no fixed list of names collides in every process; unlike SipHash it does
//! not claim to hold against someone who can measure the loop's timing to learn its seed.
//! Names in these maps come from objects that users with rights to create them choose;
//! a Kubernetes name is at most 253 characters.

pub use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
