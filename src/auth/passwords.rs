//! Argon2id password hashes. Hashing runs on the blocking pool so a login
//! never stalls the async workers.

use argon2::password_hash::{
    rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString,
};
use argon2::Argon2;
use std::sync::OnceLock;

use tokio::sync::Semaphore;

/// At most this many hashes at once (`GATEHOUSE_PASSWORD_HASH_CONCURRENCY`):
/// a flood of logins waits here instead of filling the blocking pool and
/// memory (each Argon2id hash takes 19 MiB).
static HASH_SLOTS: OnceLock<Semaphore> = OnceLock::new();

/// Sets the number of hashes that may run at once; the first call wins.
pub fn set_concurrency(n: usize) {
    let _ = HASH_SLOTS.set(Semaphore::new(n.max(1)));
}

fn slots() -> &'static Semaphore {
    HASH_SLOTS
        .get_or_init(|| Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get())))
}

pub fn hash_blocking(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

pub fn verify_blocking(hash: &str, password: &str) -> bool {
    match PasswordHash::new(hash) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// A hash of nothing, verified against when the user is unknown so that an
/// unknown e-mail costs the same time as a wrong password.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| hash_blocking("gatehouse-timing-equaliser").unwrap_or_default())
}

pub async fn hash(password: String) -> Result<String, String> {
    let _slot = slots().acquire().await.map_err(|e| e.to_string())?;
    tokio::task::spawn_blocking(move || hash_blocking(&password))
        .await
        .map_err(|e| e.to_string())?
}

/// Verifies `password` against `hash`, or against a dummy hash when `hash` is None.
pub async fn verify(hash: Option<String>, password: String) -> bool {
    // Its own span in a login's trace: the one slow step of a login.
    crate::telemetry::in_span("password verify", async move {
        let Ok(_slot) = slots().acquire().await else {
            return false;
        };
        tokio::task::spawn_blocking(move || match hash {
            Some(h) => verify_blocking(&h, &password),
            None => {
                let _ = verify_blocking(dummy_hash(), &password);
                false
            }
        })
        .await
        .unwrap_or(false)
    })
    .await
}

pub fn warm_up() {
    let _ = dummy_hash();
}

pub const MIN_PASSWORD_LEN: usize = 8;
pub const MAX_PASSWORD_LEN: usize = 1024;

pub fn check_password_rules(password: &str) -> Result<(), String> {
    let n = password.chars().count();
    if n < MIN_PASSWORD_LEN {
        return Err(format!(
            "The password must have at least {MIN_PASSWORD_LEN} characters."
        ));
    }
    if n > MAX_PASSWORD_LEN {
        return Err(format!(
            "The password must have at most {MAX_PASSWORD_LEN} characters."
        ));
    }
    Ok(())
}
