//! The admin command line, driven as an operator would: the real
//! `gatehouse` binary on the same database as a real server (SQLite, or
//! PostgreSQL when GATEHOUSE_TEST_DATABASE_URL is set).

use crate::common;

use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::procs::free_port;
use common::*;
use serde_json::Value;

/// Runs `gatehouse ARGS` with `env` (and nothing of the caller's GATEHOUSE_*
/// settings), feeding `stdin`.
fn gatehouse(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("GATEHOUSE_") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn gatehouse");
    let mut input = child.stdin.take().expect("stdin");
    // A command that refuses its arguments may exit before reading its
    // input: a closed pipe is not a failure here, its exit status is.
    if let Err(e) = input.write_all(stdin.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    drop(input);
    child.wait_with_output().expect("gatehouse runs")
}

fn on(db: &str, args: &[&str], stdin: &str) -> Output {
    gatehouse(args, &[("GATEHOUSE_DATABASE_URL", db)], stdin)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(o)))
}

/// Exit status `code` with a one-line plain message on standard error.
#[track_caller]
fn assert_fails(o: &Output, code: i32, says: &str) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout: {} stderr: {}",
        stdout(o),
        stderr(o)
    );
    let err = stderr(o);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("gatehouse: ") && last.contains(says),
        "the last line of stderr should be a message saying {says:?}: {err}"
    );
}

#[test]
fn version_names_the_newest_release_of_the_changelog() {
    let o = gatehouse(&["--version"], &[], "");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("gatehouse {}\n", newest_release()));
}

#[tokio::test]
async fn users_create_makes_a_user_who_logs_in_to_a_server_on_the_same_database() {
    let app = spawn_app().await;
    let db = app.settings.database_url.clone();
    let o = on(
        &db,
        &[
            "users",
            "create",
            "--email",
            "Ops@Example.com",
            "--admin",
            "--password-stdin",
        ],
        "ops-password-1\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let user = json_out(&o);
    assert_eq!(user["email"], "ops@example.com");
    assert_eq!(user["is_admin"], true);
    assert!(user["id"].as_str().is_some_and(|id| !id.is_empty()));

    let token = app.login_token("ops@example.com", "ops-password-1").await;
    let me: Value = app.get("/api/users/me", &token).await.json().await.unwrap();
    assert_eq!(me["id"], user["id"]);
    assert_eq!(me["is_admin"], true);

    let list = on(&db, &["users", "list"], "");
    assert!(list.status.success(), "{}", stderr(&list));
    let users = json_out(&list);
    let entry = users
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["email"] == "ops@example.com")
        .expect("listed");
    assert_eq!(entry["id"], user["id"]);
    assert!(
        !stdout(&list).contains("argon2") && !stdout(&list).contains("password"),
        "no password data: {}",
        stdout(&list)
    );
}

#[tokio::test]
async fn users_create_exits_1_for_a_taken_email_and_2_for_bad_input() {
    let (db, _dir) = fresh_database().await;
    let create = |email: &str, pw: &str, extra: &[&str]| {
        let mut args = vec!["users", "create", "--email", email];
        args.extend_from_slice(extra);
        on(&db, &args, pw)
    };
    let first = create("taken@example.com", "password-123\n", &["--password-stdin"]);
    assert!(first.status.success(), "{}", stderr(&first));

    let o = create("TAKEN@example.com", "password-456\n", &["--password-stdin"]);
    assert_fails(&o, 1, "already exists");
    assert!(o.stdout.is_empty());

    assert_fails(
        &create("not-an-email", "password-123\n", &["--password-stdin"]),
        2,
        "e-mail",
    );
    assert_fails(
        &create("short@example.com", "short\n", &["--password-stdin"]),
        2,
        "at least 8 characters",
    );
    assert_fails(
        &create("empty@example.com", "", &["--password-stdin"]),
        2,
        "at least 8 characters",
    );
    assert_fails(
        &create("nostdin@example.com", "password-123\n", &[]),
        2,
        "--password-stdin",
    );
    // An unknown flag: clap's one-line error first, usage text after.
    let o = create(
        "flag@example.com",
        "password-123\n",
        &["--password-stdin", "--bogus"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o)
            .lines()
            .next()
            .unwrap_or_default()
            .contains("--bogus"),
        "{}",
        stderr(&o)
    );
    // Nothing of the refused attempts was created.
    let users = json_out(&on(&db, &["users", "list"], ""));
    let emails: Vec<&str> = users
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u["email"].as_str())
        .collect();
    assert_eq!(emails, ["taken@example.com"]);
}

#[tokio::test]
async fn password_stdin_takes_the_first_line_without_its_line_ending() {
    let app = spawn_app().await;
    let db = app.settings.database_url.clone();
    let o = on(
        &db,
        &[
            "users",
            "create",
            "--email",
            "crlf@example.com",
            "--password-stdin",
        ],
        "first-line-pw\r\nsecond line is not the password\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        app.login("crlf@example.com", "first-line-pw")
            .await
            .status(),
        200
    );
    // Without a line ending at all, the whole input is the password.
    let o = on(
        &db,
        &[
            "users",
            "set-password",
            "--email",
            "crlf@example.com",
            "--password-stdin",
        ],
        "no-newline-pw",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        app.login("crlf@example.com", "no-newline-pw")
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn set_password_replaces_the_login_password_and_an_unknown_user_exits_1() {
    let app = spawn_app().await;
    let db = app.settings.database_url.clone();
    app.user("pw@example.com").await;
    let o = on(
        &db,
        &[
            "users",
            "set-password",
            "--email",
            "PW@example.com",
            "--password-stdin",
        ],
        "brand-new-password\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json_out(&o)["email"], "pw@example.com");
    assert_eq!(
        app.login("pw@example.com", "user-password-1")
            .await
            .status(),
        400
    );
    assert_eq!(
        app.login("pw@example.com", "brand-new-password")
            .await
            .status(),
        200
    );

    let o = on(
        &db,
        &[
            "users",
            "set-password",
            "--email",
            "ghost@example.com",
            "--password-stdin",
        ],
        "brand-new-password\n",
    );
    assert_fails(&o, 1, "no user");
    let o = on(
        &db,
        &[
            "users",
            "set-password",
            "--email",
            "pw@example.com",
            "--password-stdin",
        ],
        "tiny\n",
    );
    assert_fails(&o, 2, "at least 8 characters");
    assert_eq!(
        app.login("pw@example.com", "brand-new-password")
            .await
            .status(),
        200,
        "a refused change changes nothing"
    );
}

#[tokio::test]
async fn disable_stops_the_users_logins_and_api_keys() {
    let mut app = spawn_app().await;
    let db = app.settings.database_url.clone();
    let (_, token) = app.user("leaver@example.com").await;
    let key = on(
        &db,
        &[
            "keys",
            "create",
            "--user",
            "leaver@example.com",
            "--name",
            "k",
        ],
        "",
    );
    assert!(key.status.success(), "{}", stderr(&key));
    let key = stdout(&key).trim().to_string();
    assert_eq!(app.get("/v1/models", &key).await.status(), 200);
    assert_eq!(app.get("/api/users/me", &token).await.status(), 200);

    let o = on(
        &db,
        &["users", "disable", "--email", "leaver@example.com"],
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json_out(&o)["is_active"], false);

    if !db.starts_with("postgres") {
        // SQLite: no NOTIFY between processes; a running server notices
        // within its cache lifetime, a restarted one at once.
        app.restart().await;
    }
    // On PostgreSQL the running server hears the CLI's NOTIFY.
    let refused = common::procs::eventually(Duration::from_secs(2), || {
        let app = &app;
        let key = key.clone();
        async move { app.get("/v1/models", &key).await.status() == 401 }
    })
    .await;
    assert!(refused.is_some(), "the disabled user's key still works");
    assert_eq!(
        app.login("leaver@example.com", "user-password-1")
            .await
            .status(),
        400
    );
    assert_fails(
        &on(
            &db,
            &["users", "disable", "--email", "ghost@example.com"],
            "",
        ),
        1,
        "no user",
    );
}

#[tokio::test]
async fn keys_create_prints_only_a_key_that_works_and_keys_list_shows_no_secret() {
    let app = spawn_app().await;
    let db = app.settings.database_url.clone();
    app.user("dev@example.com").await;
    let o = on(
        &db,
        &[
            "keys",
            "create",
            "--user",
            "dev@example.com",
            "--name",
            "ci",
            "--models",
            "chat-a, chat-b",
            "--expires-at",
            "2099-01-31T00:00:00Z",
        ],
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "the key alone on one line: {out:?}");
    let key = out.trim_end_matches('\n');
    assert!(key.starts_with("gtk_") && !key.contains(' '), "{key:?}");
    let models: Value = app.get("/v1/models", key).await.json().await.unwrap();
    assert_eq!(models["object"], "list", "{models}");

    let o = on(&db, &["keys", "list", "--user", "dev@example.com"], "");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains(&key[4..]), "no secret in the list");
    let list = json_out(&o);
    let keys = list.as_array().unwrap();
    assert_eq!(keys.len(), 1);
    let k = &keys[0];
    assert_eq!(k["name"], "ci");
    assert_eq!(k["models"], serde_json::json!(["chat-a", "chat-b"]));
    assert_eq!(k["expires_at"], "2099-01-31T00:00:00.000Z");
    assert!(k["created_at"].is_string() && k["id"].is_string());
    assert!(k.get("key").is_none());

    // The list is the one the API shows the owner.
    let owner = app.login_token("dev@example.com", "user-password-1").await;
    let api: Value = app.get("/api/api-keys", &owner).await.json().await.unwrap();
    assert_eq!(api[0]["id"], k["id"]);
}

#[tokio::test]
async fn keys_create_refuses_bad_input_with_exit_2_and_an_unknown_user_with_exit_1() {
    let (db, _dir) = fresh_database().await;
    let o = on(
        &db,
        &[
            "users",
            "create",
            "--email",
            "k@example.com",
            "--password-stdin",
        ],
        "password-123\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let keys = |extra: &[&str]| {
        let mut args = vec!["keys", "create", "--user", "k@example.com"];
        args.extend_from_slice(extra);
        on(&db, &args, "")
    };
    assert_fails(
        &keys(&["--name", "x", "--expires-at", "next tuesday"]),
        2,
        "RFC 3339",
    );
    assert_fails(
        &keys(&["--name", "x", "--expires-at", "2001-01-01T00:00:00Z"]),
        2,
        "future",
    );
    assert_fails(&keys(&["--name", "x", "--models", ""]), 2, "models");
    assert_fails(&keys(&["--name", "x", "--models", "a,,b"]), 2, "models");
    assert_fails(&keys(&["--name", "  "]), 2, "name");
    let o = keys(&["--expires-at", "2099-01-01T00:00:00Z"]);
    assert_eq!(o.status.code(), Some(2), "--name is required");
    assert_fails(
        &on(
            &db,
            &[
                "keys",
                "create",
                "--user",
                "nobody@example.com",
                "--name",
                "x",
            ],
            "",
        ),
        1,
        "no user",
    );
    let list = on(&db, &["keys", "list", "--user", "k@example.com"], "");
    assert_eq!(
        json_out(&list),
        serde_json::json!([]),
        "nothing was created"
    );
}

#[tokio::test]
async fn a_fresh_database_is_created_and_migrated_and_logs_stay_off_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let db = format!("sqlite://{}", path.display());
    let o = gatehouse(
        &["users", "list"],
        &[("GATEHOUSE_DATABASE_URL", &db), ("GATEHOUSE_LOG", "debug")],
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json_out(&o), serde_json::json!([]));
    assert!(path.exists());
    let o = gatehouse(
        &[
            "users",
            "create",
            "--email",
            "first@example.com",
            "--password-stdin",
        ],
        &[("GATEHOUSE_DATABASE_URL", &db), ("GATEHOUSE_LOG", "debug")],
        "password-123\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json_out(&o)["email"], "first@example.com");
}

#[test]
fn a_database_that_cannot_be_opened_exits_1_within_20_seconds_without_showing_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "Pa55wordThatMustNotShow";
    let closed_port = free_port();
    for (url, code) in [
        // A directory is not a database file.
        (format!("sqlite://{}", dir.path().display()), 1),
        // Nothing listens there.
        (
            format!("postgres://gatehouse:{secret}@127.0.0.1:{closed_port}/gatehouse"),
            1,
        ),
        (
            format!("postgresql://gatehouse:{secret}@127.0.0.1:{closed_port}/gatehouse"),
            1,
        ),
        // Neither sqlite:// nor postgres://.
        (format!("mysql://gatehouse:{secret}@127.0.0.1/gatehouse"), 2),
        (format!("gatehouse:{secret}@127.0.0.1/gatehouse"), 2),
    ] {
        for args in [
            &["users", "list"][..],
            &["keys", "list", "--user", "a@example.com"][..],
        ] {
            let started = Instant::now();
            let o = gatehouse(args, &[("GATEHOUSE_DATABASE_URL", &url)], "");
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{url}: took {:?}",
                started.elapsed()
            );
            let words = if code == 1 {
                "cannot open the database"
            } else {
                "GATEHOUSE_DATABASE_URL"
            };
            assert_fails(&o, code, words);
            let all = format!("{}{}", stdout(&o), stderr(&o));
            assert!(!all.contains(secret), "{url}: the password shows: {all}");
        }
    }
}

#[test]
fn config_check_accepts_the_example_file_and_lists_every_problem_of_a_bad_one() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/gatehouse.example.toml");
    let o = gatehouse(&["config", "check", example], &[], "");
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = json_out(&o);
    assert_eq!(summary["ok"], true);
    assert!(summary["providers"].as_u64() >= Some(1));
    assert!(summary["models"].as_u64() >= Some(1));
    assert!(summary["agents"].as_u64() >= Some(1));
    // The default file is GATEHOUSE_CONFIG.
    let o = gatehouse(&["config", "check"], &[("GATEHOUSE_CONFIG", example)], "");
    assert!(o.status.success(), "{}", stderr(&o));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        r#"
[[providers]]
name = "vllm"
type = "openai"
base_url = "ftp://example.com"

[[models]]
id = "chat"
kind = "poem"
provider = "vllm"
upstream_model = "m"

[[models]]
id = "embed"
kind = "embeddings"
provider = "missing-provider"
upstream_model = "e"

[[agents]]
address = "helper"
name = "Helper"
model = "embed-or-not"
default_tool_mode = "sometimes"
"#,
    )
    .unwrap();
    let o = gatehouse(&["config", "check", bad.to_str().unwrap()], &[], "");
    assert_fails(&o, 1, "4 problems");
    let problems: Vec<String> = serde_json::from_value(json_out(&o)["problems"].clone()).unwrap();
    assert_eq!(problems.len(), 4, "{problems:?}");
    for (entry, says) in [
        ("provider vllm", "base_url"),
        ("model chat", "kind"),
        ("model embed", "missing-provider"),
        ("agent helper", "embed-or-not"),
    ] {
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(&format!("{entry}: ")) && p.contains(says)),
            "no problem naming {entry} and {says}: {problems:?}"
        );
    }

    let not_toml = dir.path().join("x.toml");
    std::fs::write(&not_toml, "this is = = not toml").unwrap();
    let o = gatehouse(&["config", "check", not_toml.to_str().unwrap()], &[], "");
    assert_fails(&o, 1, "not a TOML file");

    let o = gatehouse(&["config", "check"], &[], "");
    assert_fails(&o, 2, "GATEHOUSE_CONFIG");
}

// The check talks to the in-process server while this thread waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_exits_0_on_200_and_1_on_any_other_answer_or_none() {
    let app = spawn_app().await;
    let ok = gatehouse(
        &["healthcheck", "--url", &format!("{}/healthz", app.url)],
        &[],
        "",
    );
    assert!(ok.status.success(), "{}", stderr(&ok));

    let not_found = gatehouse(
        &["healthcheck", "--url", &format!("{}/no-such-page", app.url)],
        &[],
        "",
    );
    assert_fails(&not_found, 1, "404");

    let closed = format!("http://127.0.0.1:{}/healthz", free_port());
    assert_fails(
        &gatehouse(&["healthcheck", "--url", &closed], &[], ""),
        1,
        &closed,
    );

    // A server that accepts and never answers: given up after 5 seconds.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/healthz", silent.local_addr().unwrap());
    let started = Instant::now();
    let o = gatehouse(&["healthcheck", "--url", &url], &[], "");
    assert_fails(&o, 1, "no answer within 5 seconds");
    assert!(started.elapsed() < Duration::from_secs(10));

    assert_fails(
        &gatehouse(&["healthcheck", "--url", "not a url"], &[], ""),
        2,
        "--url",
    );
}

// The check talks to the in-process server while this thread waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_defaults_to_the_healthz_of_gatehouse_listen() {
    let app = spawn_app().await;
    let listen = app.url.trim_start_matches("http://");
    let o = gatehouse(&["healthcheck"], &[("GATEHOUSE_LISTEN", listen)], "");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        json_out(&o)["url"],
        format!("http://{listen}/healthz").as_str()
    );
    let nobody = format!("127.0.0.1:{}", free_port());
    let o = gatehouse(&["healthcheck"], &[("GATEHOUSE_LISTEN", &nobody)], "");
    assert_fails(&o, 1, &nobody);
}

#[test]
fn a_bad_currency_stops_the_server_and_every_command_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("c.db").display());
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/gatehouse.example.toml");
    for bad in ["usd", "US", "EURO", "U$D"] {
        for args in [
            &["serve"][..],
            &["users", "list"][..],
            &["keys", "list", "--user", "a@example.com"][..],
            &["config", "check", example][..],
            &["healthcheck"][..],
        ] {
            let o = gatehouse(
                args,
                &[("GATEHOUSE_CURRENCY", bad), ("GATEHOUSE_DATABASE_URL", &db)],
                "",
            );
            assert_fails(&o, 2, "GATEHOUSE_CURRENCY");
        }
    }
    // Three upper-case letters pass.
    let o = gatehouse(
        &["config", "check", example],
        &[("GATEHOUSE_CURRENCY", "EUR")],
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json_out(&o)["prices"], 1);
}

#[test]
fn a_bad_unpriced_policy_stops_the_server_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("u.db").display());
    for bad in ["Admit", "deny", "1"] {
        let o = gatehouse(
            &["serve"],
            &[
                ("GATEHOUSE_UNPRICED_POLICY", bad),
                ("GATEHOUSE_DATABASE_URL", &db),
            ],
            "",
        );
        assert_fails(&o, 2, "GATEHOUSE_UNPRICED_POLICY");
    }
}
