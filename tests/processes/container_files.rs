//! The container files (`Dockerfile`, `compose.yaml`, `.dockerignore`) as the
//! contract's "Container" section fixes them. No container engine runs in CI,
//! so these read the files and check what an engine would do with them, and
//! run the image's own start and health-check commands, with the image's
//! environment, on the real binary. `scripts/container-test.sh` builds and
//! runs the image itself where an engine runs.

use std::collections::BTreeMap;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// One Dockerfile instruction: keyword (upper case) and its argument text.
#[derive(Debug, Clone)]
struct Instruction {
    keyword: String,
    args: String,
}

/// Instructions grouped by stage (each starts with its FROM), with line
/// continuations joined and comments dropped, as the builder reads them.
fn dockerfile_stages(text: &str) -> Vec<Vec<Instruction>> {
    let mut logical: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if !current.is_empty() && trimmed.starts_with('#') {
            continue; // a comment inside a continued instruction
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
    }
    let mut stages: Vec<Vec<Instruction>> = Vec::new();
    for l in logical {
        let (kw, args) = l.split_once(char::is_whitespace).unwrap_or((&l, ""));
        let ins = Instruction {
            keyword: kw.to_ascii_uppercase(),
            args: args.split_whitespace().collect::<Vec<_>>().join(" "),
        };
        if ins.keyword == "FROM" {
            stages.push(vec![ins]);
        } else if let Some(stage) = stages.last_mut() {
            stage.push(ins);
        }
    }
    stages
}

/// `ENV A=1 B=2` pairs of a stage, later ones winning.
fn env_of(stage: &[Instruction]) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for i in stage.iter().filter(|i| i.keyword == "ENV") {
        for pair in i.args.split_whitespace() {
            let (k, v) = pair
                .split_once('=')
                .unwrap_or_else(|| panic!("ENV {pair}: use the KEY=value form"));
            env.insert(k.to_string(), v.trim_matches('"').to_string());
        }
    }
    env
}

/// The JSON (exec) form of CMD/ENTRYPOINT/HEALTHCHECK CMD: the words run.
fn exec_form(args: &str) -> Vec<String> {
    serde_json::from_str(args)
        .unwrap_or_else(|e| panic!("{args}: not the exec (JSON array) form: {e}"))
}

fn last<'a>(stage: &'a [Instruction], kw: &str) -> Option<&'a Instruction> {
    stage.iter().rev().find(|i| i.keyword == kw)
}

#[test]
fn dockerfile_is_multi_stage_and_the_final_image_holds_only_the_binary_from_the_build_stage() {
    let stages = dockerfile_stages(&read("Dockerfile"));
    assert!(
        stages.len() >= 2,
        "a multi-stage build needs a build stage and a final stage"
    );
    let build_from = &stages[0][0].args;
    assert!(
        build_from.contains(" AS ") || build_from.contains(" as "),
        "the build stage is named: {build_from}"
    );
    let build_name = build_from.rsplit(' ').next().unwrap_or_default();
    let build_runs: Vec<&str> = stages[0]
        .iter()
        .filter(|i| i.keyword == "RUN")
        .map(|i| i.args.as_str())
        .collect();
    assert!(
        build_runs
            .iter()
            .any(|r| r.contains("cargo build --release") && r.contains("--locked")),
        "the build stage compiles the release binary from Cargo.lock: {build_runs:?}"
    );
    let last_stage = stages.last().unwrap();
    let base = &last_stage[0].args;
    assert!(
        !base.starts_with("rust"),
        "the final image must not carry the toolchain: FROM {base}"
    );
    assert!(
        base.contains("slim") || base.contains("distroless") || base.contains("alpine"),
        "the final image is a small base: FROM {base}"
    );
    let copies: Vec<&str> = last_stage
        .iter()
        .filter(|i| i.keyword == "COPY")
        .map(|i| i.args.as_str())
        .collect();
    assert_eq!(
        copies.len(),
        1,
        "the final image copies one thing: {copies:?}"
    );
    assert!(
        copies[0].starts_with(&format!("--from={build_name} "))
            && copies[0].ends_with("/usr/local/bin/gatehouse"),
        "the binary comes from the build stage onto PATH: {}",
        copies[0]
    );
}

#[test]
fn dockerfile_final_image_runs_serve_as_a_non_root_user_on_0_0_0_0_8080_with_sqlite_under_the_data_volume(
) {
    let stages = dockerfile_stages(&read("Dockerfile"));
    let stage = stages.last().unwrap();
    let user = last(stage, "USER")
        .expect("the final stage sets USER")
        .args
        .clone();
    let name = user.split(':').next().unwrap_or_default();
    assert!(
        !name.is_empty() && name != "root" && name != "0",
        "the container runs as a non-root user, not {user:?}"
    );
    // The numeric user must be the one the stage created and gave /data to.
    let runs: String = stage
        .iter()
        .filter(|i| i.keyword == "RUN")
        .map(|i| i.args.clone())
        .collect::<Vec<_>>()
        .join(" && ");
    assert!(
        runs.contains(&format!("--uid {name}")) || !name.chars().all(|c| c.is_ascii_digit()),
        "USER {user} is created in the final stage: {runs}"
    );
    assert!(
        runs.contains("chown") && runs.contains("/data"),
        "/data belongs to that user, so SQLite can write there: {runs}"
    );

    let env = env_of(stage);
    assert_eq!(
        env.get("GATEHOUSE_LISTEN").map(String::as_str),
        Some("0.0.0.0:8080")
    );
    assert_eq!(
        env.get("GATEHOUSE_DATABASE_URL").map(String::as_str),
        Some("sqlite:///data/gatehouse.db")
    );
    let expose = last(stage, "EXPOSE").expect("EXPOSE").args.clone();
    assert!(expose
        .split_whitespace()
        .any(|p| p == "8080" || p == "8080/tcp"));
    let volume = last(stage, "VOLUME").expect("VOLUME").args.clone();
    assert!(
        volume == "/data" || volume == "[\"/data\"]",
        "VOLUME /data, not {volume}"
    );
    // The chown must come before VOLUME: later changes to a volume path are lost.
    let pos = |kw: &str| stage.iter().position(|i| i.keyword == kw).unwrap();
    assert!(pos("RUN") < pos("VOLUME"));

    let mut command = last(stage, "ENTRYPOINT")
        .map(|i| exec_form(&i.args))
        .unwrap_or_default();
    command.extend(exec_form(&last(stage, "CMD").expect("CMD").args));
    assert_eq!(command, ["gatehouse", "serve"]);
}

#[test]
fn dockerfile_healthcheck_runs_gatehouse_healthcheck_with_a_timeout_above_its_own() {
    let stages = dockerfile_stages(&read("Dockerfile"));
    let hc = last(stages.last().unwrap(), "HEALTHCHECK")
        .expect("HEALTHCHECK in the final stage")
        .args
        .clone();
    let (options, cmd) = hc.split_once("CMD ").expect("HEALTHCHECK ... CMD [...]");
    let words = exec_form(cmd);
    assert_eq!(
        words[..2],
        ["gatehouse", "healthcheck"],
        "no curl in the image: {words:?}"
    );
    // `gatehouse healthcheck` gives up after 5 s; the engine must wait longer,
    // or a slow answer is reported as a hung check instead of a failed one.
    let timeout = options
        .split_whitespace()
        .find_map(|o| o.strip_prefix("--timeout="))
        .expect("--timeout set");
    let secs: u64 = timeout
        .strip_suffix('s')
        .and_then(|s| s.parse().ok())
        .expect("timeout in seconds");
    assert!(secs > 5, "--timeout={timeout}");
}

#[test]
fn dockerignore_keeps_build_output_git_and_local_databases_out_of_the_context() {
    let text = read(".dockerignore");
    let rules: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for needed in ["target", ".git", "*.db", "**/node_modules", ".venv"] {
        assert!(rules.contains(&needed), "{needed} missing from {rules:?}");
    }
    // Nothing the build needs may be excluded.
    for needed in [
        "src",
        "crates",
        "migrations",
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
    ] {
        assert!(
            !rules.iter().any(|r| r.trim_start_matches('/') == needed),
            "{needed} is needed by the build"
        );
    }
}

/// `${VAR:-default}` and `${VAR}` as compose interpolates them, with an empty
/// environment (what `docker compose up` does on a machine with nothing set).
fn interpolate_defaults(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find('}').expect("closed ${") + i;
        let inner = &rest[i + 2..end];
        if let Some((_, default)) = inner.split_once(":-") {
            out.push_str(default);
        } else {
            assert!(
                !inner.contains(":?"),
                "compose must start with nothing set: {inner}"
            );
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn env_map(service: &serde_yaml::Value) -> BTreeMap<String, String> {
    match &service["environment"] {
        serde_yaml::Value::Mapping(m) => m
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_yaml::Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other).unwrap().trim().to_string(),
                };
                (k.as_str().unwrap().to_string(), interpolate_defaults(&v))
            })
            .collect(),
        serde_yaml::Value::Sequence(list) => list
            .iter()
            .filter_map(|e| e.as_str())
            .filter_map(|e| e.split_once('='))
            .map(|(k, v)| (k.to_string(), interpolate_defaults(v)))
            .collect(),
        _ => BTreeMap::new(),
    }
}

#[test]
fn compose_builds_gatehouse_and_starts_it_only_after_postgres_is_healthy() {
    let doc: serde_yaml::Value = serde_yaml::from_str(&read("compose.yaml")).expect("YAML");
    let services = &doc["services"];
    let gh = &services["gatehouse"];
    let pg = &services["postgres"];
    assert!(
        gh.is_mapping() && pg.is_mapping(),
        "services gatehouse and postgres"
    );
    assert_eq!(
        gh["build"].as_str(),
        Some("."),
        "built from the root Dockerfile"
    );
    let image = pg["image"].as_str().expect("postgres image");
    assert!(
        image.starts_with("postgres:"),
        "the official image with a tag: {image}"
    );
    let test = &pg["healthcheck"]["test"];
    let probe = match test {
        serde_yaml::Value::Sequence(s) => s
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        serde_yaml::Value::String(s) => s.clone(),
        _ => panic!("postgres has a healthcheck test"),
    };
    assert!(probe.contains("pg_isready"), "{probe}");
    assert_eq!(
        gh["depends_on"]["postgres"]["condition"].as_str(),
        Some("service_healthy"),
        "gatehouse waits for a healthy postgres"
    );
    let published: Vec<String> = gh["ports"]
        .as_sequence()
        .expect("gatehouse publishes a port")
        .iter()
        .map(|p| p.as_str().map_or_else(|| format!("{p:?}"), str::to_string))
        .collect();
    assert!(
        published.iter().any(|p| p.ends_with(":8080")),
        "{published:?}"
    );
}

#[test]
fn compose_database_url_names_the_postgres_service_with_its_own_user_password_and_database() {
    let doc: serde_yaml::Value = serde_yaml::from_str(&read("compose.yaml")).expect("YAML");
    let gh_env = env_map(&doc["services"]["gatehouse"]);
    let pg_env = env_map(&doc["services"]["postgres"]);
    let url = gh_env
        .get("GATEHOUSE_DATABASE_URL")
        .expect("GATEHOUSE_DATABASE_URL set for gatehouse");
    let parsed = reqwest::Url::parse(url).expect("a URL");
    assert!(
        matches!(parsed.scheme(), "postgres" | "postgresql"),
        "{url}"
    );
    assert_eq!(parsed.host_str(), Some("postgres"), "{url}");
    let pg_user = pg_env
        .get("POSTGRES_USER")
        .cloned()
        .unwrap_or_else(|| "postgres".into());
    let pg_db = pg_env
        .get("POSTGRES_DB")
        .cloned()
        .unwrap_or_else(|| pg_user.clone());
    assert_eq!(parsed.username(), pg_user, "{url}");
    assert_eq!(
        parsed.password(),
        pg_env.get("POSTGRES_PASSWORD").map(String::as_str),
        "the password is the one postgres was given"
    );
    assert_eq!(parsed.path(), format!("/{pg_db}"), "{url}");
}

/// The final stage's command, environment and health check, run as the image
/// would run them: only /data and the port differ (a temporary directory and
/// a free port stand in for the volume and the published port).
#[test]
fn the_images_command_serves_with_the_images_environment_and_its_healthcheck_passes() {
    let stages = dockerfile_stages(&read("Dockerfile"));
    let stage = stages.last().unwrap();
    let data = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let env: BTreeMap<String, String> = env_of(stage)
        .into_iter()
        .map(|(k, v)| {
            let v = v
                .replace("/data", &data.path().display().to_string())
                .replace(":8080", &format!(":{port}"));
            (k, v)
        })
        .collect();
    let bin = env!("CARGO_BIN_EXE_gatehouse");
    let command = |words: Vec<String>| {
        assert_eq!(words[0], "gatehouse", "{words:?}");
        let mut c = std::process::Command::new(bin);
        c.args(&words[1..]).env_clear().envs(&env);
        c
    };
    let mut words = last(stage, "ENTRYPOINT")
        .map(|i| exec_form(&i.args))
        .unwrap_or_default();
    words.extend(exec_form(&last(stage, "CMD").unwrap().args));
    let mut server = command(words)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start the image's command");
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let server = Kill(&mut server);

    let hc = last(stage, "HEALTHCHECK").unwrap().args.clone();
    let (_, cmd) = hc.split_once("CMD ").unwrap();
    let check = || {
        command(exec_form(cmd))
            .output()
            .expect("run the health check")
    };
    let started = std::time::Instant::now();
    loop {
        let out = check();
        if out.status.success() {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the health check never passed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // It listens on every address (0.0.0.0), and the database is in the volume.
    assert!(data.path().join("gatehouse.db").exists());
    drop(server);
    let out = check();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a stopped server fails the check"
    );
}
