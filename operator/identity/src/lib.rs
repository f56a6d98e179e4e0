//! Spillway's workload identity: one token issuer for pods on private and cloud nodes alike.
//!
//! This crate owns the pure parts, with no I/O and no clock (time arrives as an argument):
//! - [`keys`]: ES256 (default) or RS256 signing keys, generated with aws-lc-rs, named by their
//!   RFC 7638 thumbprint, stored as PKCS#8 in the issuer's Secret and never printed;
//! - [`rotation`]: which keys exist, publish and sign at a given time;
//! - [`token`]: the claims (`iss`, `sub` = the pod's service account, `aud`, `iat`, `nbf`,
//!   `exp`, `jti`, and `spillway.io` with the job, queue, environment and pool) and signing;
//! - [`verify`]: strict verification against a JWKS, for `spillway token verify` and for
//!   services;
//! - [`documents`]: the OIDC discovery document and the JWKS.
//!
//! Invariants: a key is in the JWKS at least one token lifetime before it signs (the very
//! first key excepted) and stays there until every token it signed has expired; private key
//! material appears in no `Debug` output, log or Event.

pub mod documents;
pub mod keys;
pub mod rotation;
pub mod token;
pub mod verify;

pub use keys::{Algorithm, KeyRing, SigningKey};
pub use rotation::Schedule;
pub use token::{Claims, Issued, Request, Workload};
pub use verify::{Verifier, VerifyError};

use spillway_core::ErrorCategory;

/// What can go wrong issuing tokens.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The settings cannot work (periods, algorithm, audiences).
    #[error("identity settings: {0}")]
    Settings(String),
    /// The stored keys cannot be used.
    #[error("identity keys: {0}")]
    Keys(String),
    /// Key generation or signing failed.
    #[error("identity crypto: {0}")]
    Crypto(String),
}

impl Error {
    pub fn category(&self) -> ErrorCategory {
        match self {
            Error::Settings(_) | Error::Keys(_) => ErrorCategory::InvalidInput,
            Error::Crypto(_) => ErrorCategory::Transient,
        }
    }
}
