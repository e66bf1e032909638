//! `GATEHOUSE_SECRET` as the binary reads it at start: 32 characters are
//! enough, fewer stop it before it opens the database. (What the secret
//! seals: `tests/api/http/hardening.rs`.)

#[test]
fn a_secret_of_exactly_32_characters_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["users", "list"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env(
            "GATEHOUSE_DATABASE_URL",
            format!("sqlite://{}/g.db", dir.path().display()),
        )
        .env("GATEHOUSE_SECRET", "x".repeat(32))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

#[test]
fn a_short_gatehouse_secret_stops_the_server_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GATEHOUSE_LISTEN", "127.0.0.1:0")
        .env(
            "GATEHOUSE_DATABASE_URL",
            format!("sqlite://{}/g.db", dir.path().display()),
        )
        .env("GATEHOUSE_SECRET", "x".repeat(31))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("GATEHOUSE_SECRET"), "{stderr}");
    assert!(!dir.path().join("g.db").exists(), "started before refusing");
}
