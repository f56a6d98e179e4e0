//! Seeded mutation of seed inputs: byte flips, interesting bytes, insertions and deletions,
//! repeated runs, dictionary fragments and splices of two seeds. Deterministic for a seed.

/// SplitMix64: small, seedable, and enough for choosing mutations.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

const INTERESTING: &[u8] = b"\x00\x01\x7f\x80\xff\n\r\t ,:-.0123456789\"'{}[]#&*!|>";

/// One new input from `seeds` (at least one), longer inputs capped at `max_len` bytes.
pub fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], dictionary: &[&str], max_len: usize) -> Vec<u8> {
    let mut out = seeds[rng.below(seeds.len())].clone();
    let rounds = 1 + rng.below(8);
    for _ in 0..rounds {
        let len = out.len();
        let at = if len == 0 { 0 } else { rng.below(len + 1) };
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => {
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                out.splice(at..at, bytes);
            }
            3 if len > 0 => {
                let end = (at + 1 + rng.below(32)).min(len);
                out.drain(at.min(len - 1)..end);
            }
            4 if len > 0 => {
                // Repeat a run: deep nesting, long lines, many rows.
                let start = rng.below(len);
                let end = (start + 1 + rng.below(64)).min(len);
                let run = out[start..end].to_vec();
                let times = 1 + rng.below(16);
                for _ in 0..times {
                    out.splice(end..end, run.iter().copied());
                }
            }
            5 | 6 if !dictionary.is_empty() => {
                let word = dictionary[rng.below(dictionary.len())];
                out.splice(at..at, word.bytes());
            }
            7 => {
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let to = (from + 1 + rng.below(256)).min(other.len());
                    let cut = at.min(out.len());
                    out.truncate(cut);
                    out.extend_from_slice(&other[from..to]);
                }
            }
            _ if len > 0 => {
                // Replace a number-looking run with another number.
                let i = rng.below(len);
                if out[i].is_ascii_digit() {
                    let mut end = i;
                    while end < out.len() && out[end].is_ascii_digit() {
                        end += 1;
                    }
                    let n = match rng.below(4) {
                        0 => "0".to_string(),
                        1 => u64::MAX.to_string(),
                        2 => format!("{}", rng.next_u64() as i64),
                        _ => "99999999999999999999999999".to_string(),
                    };
                    out.splice(i..end, n.bytes());
                }
            }
            _ => {}
        }
        out.truncate(max_len);
    }
    out
}
