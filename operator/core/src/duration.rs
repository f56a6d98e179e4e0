//! Durations as users write them in manifests: `90m`, `4h`, `1h30m`, `45s`, `2d`.
//!
//! The grammar is Go's `time.ParseDuration` (what `kubectl` users know) restricted to
//! non-negative values, plus `d` for days: one or more `<number><unit>` pairs, where the number
//! may have a fraction and the unit is one of `ms`, `s`, `m`, `h`, `d`. A bare `0` is allowed.

use std::fmt;

/// A non-negative duration with millisecond resolution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    millis: u64,
}

/// Why a duration string could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseDurationError {
    #[error("empty duration")]
    Empty,
    #[error(
        "invalid duration {0:?}: expected a number followed by a unit such as 90m, 4h or 1h30m"
    )]
    Syntax(String),
    #[error("invalid duration {input:?}: unknown unit {unit:?} (use ms, s, m, h or d)")]
    UnknownUnit { input: String, unit: String },
    #[error("invalid duration {0:?}: missing unit (use ms, s, m, h or d, as in 30s)")]
    MissingUnit(String),
    #[error("invalid duration {0:?}: too large")]
    Overflow(String),
}

/// A regular expression equivalent to what [`Duration::parse`] accepts, for OpenAPI schemas.
pub const DURATION_PATTERN: &str = r"^(0|([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+)$";

impl Duration {
    pub const ZERO: Duration = Duration { millis: 0 };

    pub const fn from_millis(millis: u64) -> Self {
        Duration { millis }
    }

    pub const fn from_secs(secs: u64) -> Self {
        Duration {
            millis: secs.saturating_mul(1000),
        }
    }

    pub const fn as_millis(self) -> u64 {
        self.millis
    }

    /// Whole seconds, rounded down.
    pub const fn as_secs(self) -> u64 {
        self.millis / 1000
    }

    pub fn as_secs_f64(self) -> f64 {
        self.millis as f64 / 1000.0
    }

    /// Parses `90m`, `1h30m`, `1.5h`, `250ms`, `2d` or `0`.
    pub fn parse(input: &str) -> Result<Self, ParseDurationError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(ParseDurationError::Empty);
        }
        if s == "0" {
            return Ok(Duration::ZERO);
        }
        let bytes = s.as_bytes();
        let mut i = 0;
        let mut total: f64 = 0.0;
        while i < bytes.len() {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
                i += 1;
            }
            let number = &s[start..i];
            if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
                return Err(ParseDurationError::Syntax(input.to_string()));
            }
            let value: f64 = number
                .parse()
                .map_err(|_| ParseDurationError::Syntax(input.to_string()))?;
            let unit_start = i;
            while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
                i += 1;
            }
            let unit = &s[unit_start..i];
            let factor_ms = match unit {
                "ms" => 1.0,
                "s" => 1_000.0,
                "m" => 60_000.0,
                "h" => 3_600_000.0,
                "d" => 86_400_000.0,
                "" => return Err(ParseDurationError::MissingUnit(input.to_string())),
                other => {
                    return Err(ParseDurationError::UnknownUnit {
                        input: input.to_string(),
                        unit: other.to_string(),
                    });
                }
            };
            total += value * factor_ms;
        }
        if !total.is_finite() || total > u64::MAX as f64 / 2.0 {
            return Err(ParseDurationError::Overflow(input.to_string()));
        }
        Ok(Duration {
            millis: total.round() as u64,
        })
    }
}

impl std::ops::Add for Duration {
    type Output = Duration;

    /// Saturating: durations never wrap.
    fn add(self, other: Duration) -> Duration {
        Duration::from_millis(self.as_millis().saturating_add(other.as_millis()))
    }
}

impl std::str::FromStr for Duration {
    type Err = ParseDurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Duration::parse(s)
    }
}

impl fmt::Display for Duration {
    /// Formats in the same grammar it parses, largest units first: `1h30m`, `45s`, `250ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.millis == 0 {
            return f.write_str("0s");
        }
        let mut rest = self.millis;
        for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
            if rest >= size {
                write!(f, "{}{}", rest / size, unit)?;
                rest %= size;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_forms_users_write() {
        let cases = [
            ("0", 0),
            ("45s", 45_000),
            ("90m", 5_400_000),
            ("4h", 14_400_000),
            ("1h30m", 5_400_000),
            ("1.5h", 5_400_000),
            ("250ms", 250),
            ("2d", 172_800_000),
            (" 15m ", 900_000),
        ];
        for (input, millis) in cases {
            assert_eq!(
                Duration::parse(input),
                Ok(Duration::from_millis(millis)),
                "{input}"
            );
        }
    }

    #[test]
    fn rejects_what_it_cannot_read_with_a_reason() {
        assert_eq!(Duration::parse(""), Err(ParseDurationError::Empty));
        assert!(matches!(
            Duration::parse("15"),
            Err(ParseDurationError::MissingUnit(_))
        ));
        assert!(matches!(
            Duration::parse("15min"),
            Err(ParseDurationError::UnknownUnit { unit, .. }) if unit == "min"
        ));
        assert!(matches!(
            Duration::parse("-5m"),
            Err(ParseDurationError::Syntax(_))
        ));
        assert!(matches!(
            Duration::parse("h"),
            Err(ParseDurationError::Syntax(_))
        ));
        assert!(matches!(
            Duration::parse("1.h"),
            Err(ParseDurationError::Syntax(_))
        ));
    }

    #[test]
    fn displays_in_its_own_grammar() {
        assert_eq!(Duration::from_secs(5400).to_string(), "1h30m");
        assert_eq!(Duration::from_millis(1_250).to_string(), "1s250ms");
        assert_eq!(Duration::ZERO.to_string(), "0s");
    }

    proptest! {
        #[test]
        fn display_round_trips(millis in 0u64..10_000_000_000) {
            let d = Duration::from_millis(millis);
            prop_assert_eq!(Duration::parse(&d.to_string()), Ok(d));
        }

        #[test]
        fn never_panics(s in ".{0,40}") {
            let _ = Duration::parse(&s);
        }
    }
}
