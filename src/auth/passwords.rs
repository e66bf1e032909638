//! Argon2id password hashes. Hashing runs on threads of its own so a login
//! never stalls the async workers.

use argon2::password_hash::{self, rand_core::OsRng, PasswordHash, PasswordVerifier, SaltString};
use argon2::Argon2;
use std::sync::OnceLock;

use tokio::sync::Semaphore;

/// At most this many hashes at once (`GATEHOUSE_PASSWORD_HASH_CONCURRENCY`):
/// a flood of logins waits here instead of filling the blocking pool and
/// memory (each Argon2id hash takes 19 MiB).
static CONCURRENCY: OnceLock<usize> = OnceLock::new();
static HASH_SLOTS: OnceLock<Semaphore> = OnceLock::new();
static HASHERS: OnceLock<Hashers> = OnceLock::new();

/// Sets the number of hashes that may run at once; the first call wins.
pub fn set_concurrency(n: usize) {
    let _ = CONCURRENCY.set(n.max(1));
}

fn concurrency() -> usize {
    *CONCURRENCY.get_or_init(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

fn slots() -> &'static Semaphore {
    HASH_SLOTS.get_or_init(|| Semaphore::new(concurrency()))
}

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads that do nothing but hash. On the blocking pool a
/// flood spread the hashes over many threads, and the allocator kept each
/// thread's 19 MiB after use: memory grew with the flood, not with the
/// concurrency setting.
struct Hashers {
    jobs: flume::Sender<Job>,
}

fn hashers() -> &'static Hashers {
    HASHERS.get_or_init(|| {
        // Many receivers on one queue: each thread sees for itself whether
        // a hash is waiting. (With one receiver behind a lock, a thread that
        // saw a hash queued, and lost it to a sibling, waited on the lock
        // with its work area for good.)
        let (tx, rx) = flume::unbounded::<Job>();
        for i in 0..concurrency() {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("password-hash-{i}"))
                .spawn(move || {
                    KEEP_BLOCKS.with(|k| k.set(true));
                    loop {
                        let job = match rx.try_recv() {
                            Ok(job) => job,
                            // Nothing waiting: give the work area back (19 MiB
                            // of resident memory per thread otherwise).
                            Err(flume::TryRecvError::Empty) => {
                                release_blocks();
                                match rx.recv() {
                                    Ok(job) => job,
                                    Err(_) => break,
                                }
                            }
                            Err(flume::TryRecvError::Disconnected) => break,
                        };
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "could not start a password hashing thread");
            }
        }
        Hashers { jobs: tx }
    })
}

/// Runs `f` on a hashing thread once a slot is free.
async fn on_hasher<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    let _slot = slots().acquire().await.map_err(|e| e.to_string())?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sent = hashers().jobs.send(Box::new(move || {
        let _ = tx.send(f());
    }));
    if sent.is_err() {
        return Err("no password hashing thread".to_string());
    }
    rx.await
        .map_err(|_| "a password hashing thread failed".to_string())
}

/// Argon2's work area, from the system's allocator whatever the global one
/// is: the request path's allocator keeps freed memory for reuse, and 19 MiB
/// per hashing thread would stay resident.
type WorkArea = allocator_api2::vec::Vec<argon2::Block, std::alloc::System>;

thread_local! {
    /// Argon2's working memory (19 MiB), kept by each hashing thread and
    /// reused while hashes queue up (allocating it per hash let the
    /// allocator keep many copies), released when the thread goes idle.
    static BLOCKS: std::cell::RefCell<WorkArea> =
        const { std::cell::RefCell::new(WorkArea::new_in(std::alloc::System)) };
    /// Set on the hashing threads; any other thread frees the work area
    /// right after its hash (the start-up hash, say).
    static KEEP_BLOCKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Frees the thread's work area; mapped on its own
/// ([`map_large_blocks_on_their_own`]), it goes back to the system at once.
fn release_blocks() {
    BLOCKS.with(|b| *b.borrow_mut() = WorkArea::new_in(std::alloc::System));
}

/// Makes glibc map every block of 8 MiB or more on its own (so freeing one
/// returns it at once). By default the threshold grows to the largest block
/// freed, after which a 19 MiB work area came from a thread's arena; freed, it
/// merged into the arena's top, which `malloc_trim` does not release outside
/// the main arena: 19 MiB stayed resident now and then. (`malloc_trim` after
/// each release, the first fix, missed exactly that case.)
fn map_large_blocks_on_their_own() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only changes the allocator's settings; a fixed
        // threshold is documented and affects only later allocations.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 8 * 1024 * 1024);
        }
    });
}

/// Argon2id (version 0x13) of `password` with `params` and raw `salt` into `out`.
fn argon2id_into(
    params: &argon2::Params,
    password: &[u8],
    salt: &[u8],
    out: &mut [u8],
) -> Result<(), argon2::Error> {
    let ctx = Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        params.clone(),
    );
    map_large_blocks_on_their_own();
    BLOCKS.with(|blocks| {
        let mut blocks = blocks.borrow_mut();
        let n = params.block_count();
        if blocks.len() != n {
            *blocks = WorkArea::new_in(std::alloc::System);
            blocks.resize(n, argon2::Block::default());
        }
        let done = ctx.hash_password_into_with_memory(password, salt, out, &mut blocks[..]);
        if !KEEP_BLOCKS.with(std::cell::Cell::get) {
            *blocks = WorkArea::new_in(std::alloc::System);
        }
        done
    })
}

/// The PHC string of an Argon2id hash with `params` and `salt`.
fn argon2id_phc<'a>(
    params: &argon2::Params,
    password: &[u8],
    salt: password_hash::Salt<'a>,
) -> password_hash::Result<PasswordHash<'a>> {
    let mut salt_buf = [0u8; 64];
    let salt_bytes = salt.decode_b64(&mut salt_buf)?;
    let len = params
        .output_len()
        .unwrap_or(argon2::Params::DEFAULT_OUTPUT_LEN);
    let output = password_hash::Output::init_with(len, |out| {
        argon2id_into(params, password, salt_bytes, out).map_err(password_hash::Error::from)
    })?;
    Ok(PasswordHash {
        algorithm: argon2::ARGON2ID_IDENT,
        version: Some(argon2::Version::V0x13.into()),
        params: password_hash::ParamsString::try_from(params)?,
        salt: Some(salt),
        hash: Some(output),
    })
}

pub fn hash_blocking(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    argon2id_phc(
        &argon2::Params::default(),
        password.as_bytes(),
        salt.as_salt(),
    )
    .map(|h| h.to_string())
    .map_err(|e| e.to_string())
}

pub fn verify_blocking(hash: &str, password: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let ours = parsed.algorithm == argon2::ARGON2ID_IDENT
        && parsed
            .version
            .is_none_or(|v| v == u32::from(argon2::Version::V0x13));
    match (
        ours,
        parsed.salt,
        parsed.hash,
        argon2::Params::try_from(&parsed),
    ) {
        (true, Some(salt), Some(expected), Ok(params)) => {
            argon2id_phc(&params, password.as_bytes(), salt)
                .ok()
                .and_then(|h| h.hash)
                // Output compares in constant time.
                .is_some_and(|got| got == expected)
        }
        _ => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
    }
}

/// A hash of nothing, verified against when the user is unknown so that an
/// unknown e-mail costs the same time as a wrong password.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| hash_blocking("gatehouse-timing-equaliser").unwrap_or_default())
}

pub async fn hash(password: String) -> Result<String, String> {
    on_hasher(move || hash_blocking(&password)).await?
}

/// Verifies `password` against `hash`, or against a dummy hash when `hash` is None.
pub async fn verify(hash: Option<String>, password: String) -> bool {
    // Its own span in a login's trace: the one slow step of a login.
    crate::telemetry::in_span("password verify", async move {
        on_hasher(move || match hash {
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

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::password_hash::PasswordHasher;

    #[test]
    fn our_hashes_and_the_argon2_crates_verify_each_other() {
        let ours = hash_blocking("correct horse").unwrap();
        let parsed = PasswordHash::new(&ours).unwrap();
        assert!(Argon2::default()
            .verify_password(b"correct horse", &parsed)
            .is_ok());
        assert!(
            ours.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{ours}"
        );

        let salt = SaltString::generate(&mut OsRng);
        let stock = Argon2::default()
            .hash_password(b"battery staple", &salt)
            .unwrap()
            .to_string();
        assert!(verify_blocking(&stock, "battery staple"));
        assert!(!verify_blocking(&stock, "battery stapler"));
        assert!(verify_blocking(&ours, "correct horse"));
        assert!(!verify_blocking(&ours, "correct horsE"));
        assert!(!verify_blocking("not a hash", "x"));
    }
}
