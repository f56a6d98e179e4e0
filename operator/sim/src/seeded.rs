//! Seeded draws: a value that depends only on a seed and an index, so every noisy input of a
//! run (estimates, which jobs restart) is reproducible from `--seed`.

/// SplitMix64 of `x`: a well-mixed 64-bit value.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
