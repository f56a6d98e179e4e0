//! The key-rotation schedule, as a function of time.
//!
//! With a token lifetime `L` and a rotation period `R` (`R > L`):
//! - the first key signs at once (no token, and so no verifier, exists before it);
//! - a key signs for `R`: when the signing key has signed for `R - L`, the next key is made and
//!   published, and it starts signing `L` later, so it is in every verifier's JWKS at least one
//!   token lifetime before its first token;
//! - a key that stopped signing stays published until `L` plus a minute's leeway after its
//!   successor started, so every token it signed expires while it is still published;
//! - a change of algorithm is a rotation like any other.
//!
//! [`plan`] takes the ring as stored and the clock and returns the ring as it should be.

use spillway_core::{Duration, Time};

use crate::Error;
use crate::keys::{Algorithm, KeyRing, SigningKey};

/// How long a retired key stays published beyond the last token it signed (clock skew).
pub const RETIRE_LEEWAY: Duration = Duration::from_secs(60);

/// The schedule's two periods and the algorithm of new keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    pub token_lifetime: Duration,
    pub rotation: Duration,
    pub algorithm: Algorithm,
}

impl Schedule {
    /// Why these periods cannot work, if they cannot.
    pub fn check(&self) -> Result<(), Error> {
        if self.token_lifetime < Duration::from_secs(10) {
            return Err(Error::Settings(format!(
                "the token lifetime ({}) must be at least 10s",
                self.token_lifetime
            )));
        }
        if self.rotation <= self.token_lifetime {
            return Err(Error::Settings(format!(
                "the key rotation period ({}) must be longer than the token lifetime ({})",
                self.rotation, self.token_lifetime
            )));
        }
        Ok(())
    }
}

/// The ring as it should be at `now`; `None` when it is right as it is.
pub fn plan(ring: &KeyRing, schedule: &Schedule, now: Time) -> Result<Option<KeyRing>, Error> {
    let lifetime = schedule.token_lifetime;
    let mut keys = ring.keys.clone();
    let mut changed = false;
    if keys.is_empty() {
        keys.push(SigningKey::generate(schedule.algorithm, now, now)?);
        return Ok(Some(KeyRing { keys }));
    }
    // Retire: a key whose successor has signed for a token lifetime (plus leeway).
    let mut activations: Vec<Time> = keys.iter().map(|k| k.activates).collect();
    activations.sort();
    keys.retain(|k| {
        let successor = activations.iter().find(|a| **a > k.activates);
        let keep = successor.is_none_or(|s| now < *s + lifetime + RETIRE_LEEWAY);
        changed |= !keep;
        keep
    });
    let pending = keys.iter().any(|k| k.activates > now);
    let signer = KeyRing { keys: keys.clone() }.signer(now).cloned();
    let due = match &signer {
        // Only pending keys left (cannot happen with a ring this function kept): wait.
        None => false,
        Some(s) => {
            s.alg != schedule.algorithm || now.since(s.activates) + lifetime >= schedule.rotation
        }
    };
    if due && !pending {
        keys.push(SigningKey::generate(
            schedule.algorithm,
            now,
            now + lifetime,
        )?);
        changed = true;
    }
    Ok(changed.then_some(KeyRing { keys }))
}

/// The next moment at which [`plan`] would change the ring or its signer changes: a pending
/// key starting to sign, the next key being due, a retired key leaving.
pub fn next_change(ring: &KeyRing, schedule: &Schedule, now: Time) -> Option<Time> {
    let lifetime = schedule.token_lifetime;
    let mut times: Vec<Time> = Vec::new();
    let mut activations: Vec<Time> = ring.keys.iter().map(|k| k.activates).collect();
    activations.sort();
    for k in &ring.keys {
        times.push(k.activates);
        if let Some(next) = activations.iter().find(|a| **a > k.activates) {
            times.push(*next + lifetime + RETIRE_LEEWAY);
        }
    }
    if let Some(s) = ring.signer(now) {
        let due_after = Duration::from_millis(
            schedule
                .rotation
                .as_millis()
                .saturating_sub(lifetime.as_millis()),
        );
        times.push(s.activates + due_after);
    }
    times.into_iter().filter(|t| *t > now).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule() -> Schedule {
        Schedule {
            token_lifetime: Duration::from_secs(3600),
            rotation: Duration::from_secs(7 * 24 * 3600),
            algorithm: Algorithm::ES256,
        }
    }

    fn hours(h: u64) -> Duration {
        Duration::from_secs(h * 3600)
    }

    /// Runs the schedule hour by hour for `weeks`, checking the rules at every step.
    #[test]
    fn keys_are_published_a_lifetime_before_they_sign_and_after_their_last_token() {
        let s = schedule();
        let start = Time::from_millis(1_800_000_000_000);
        let mut ring = plan(&KeyRing::default(), &s, start).unwrap().unwrap();
        assert_eq!(ring.keys.len(), 1);
        assert_eq!(
            ring.signer(start).unwrap().activates,
            start,
            "the first key signs at once"
        );
        // kid -> (first token, last token) seen signed.
        let mut signed: std::collections::BTreeMap<String, (Time, Time)> = Default::default();
        let mut kids_seen = std::collections::BTreeSet::new();
        for h in 0..(24 * 7 * 5) {
            let now = start + hours(h);
            if let Some(next) = plan(&ring, &s, now).unwrap() {
                ring = next;
            }
            let signer = ring.signer(now).unwrap().clone();
            let e = signed.entry(signer.kid.clone()).or_insert((now, now));
            e.1 = now;
            kids_seen.extend(ring.keys.iter().map(|k| k.kid.clone()));
            // Every key that signed a token still valid now is published now.
            for (kid, (_, last)) in &signed {
                if now < *last + s.token_lifetime {
                    assert!(ring.get(kid).is_some(), "{kid} dropped too early at +{h}h");
                }
            }
            // A key signs only after being published for a lifetime (the first excepted).
            if signer.created != start {
                assert!(now.since(signer.created) >= s.token_lifetime);
            }
            assert!(ring.keys.len() <= 3, "{} keys at +{h}h", ring.keys.len());
        }
        assert!(
            kids_seen.len() >= 5,
            "rotated weekly: {} keys",
            kids_seen.len()
        );
        for (first, last) in signed.values().take(3) {
            assert!(
                last.since(*first) <= s.rotation,
                "a key signs for a week at most"
            );
        }
    }

    #[test]
    fn a_new_algorithm_is_rolled_in_like_a_rotation() {
        let s = schedule();
        let start = Time::from_millis(1_800_000_000_000);
        let ring = plan(&KeyRing::default(), &s, start).unwrap().unwrap();
        let rsa = Schedule {
            algorithm: Algorithm::RS256,
            ..s
        };
        let now = start + hours(2);
        let ring = plan(&ring, &rsa, now).unwrap().expect("a new key");
        assert_eq!(ring.keys.len(), 2);
        assert_eq!(ring.signer(now).unwrap().alg, Algorithm::ES256, "not yet");
        let later = now + hours(1);
        assert_eq!(ring.signer(later).unwrap().alg, Algorithm::RS256);
        assert!(plan(&ring, &rsa, later).unwrap().is_none(), "stable");
    }

    #[test]
    fn periods_that_cannot_work_are_refused() {
        let bad = Schedule {
            rotation: Duration::from_secs(3600),
            ..schedule()
        };
        assert!(bad.check().is_err());
        assert!(schedule().check().is_ok());
    }
}
