//! Replays the fuzz corpora (fuzz/corpus/TARGET, kept minimized with
//! `cargo fuzz cmin`) through the same functions the `cargo fuzz` targets
//! call, on stable Rust: a crash once found and fixed stays fixed, and CI
//! needs no nightly. How to fuzz: docs/security.md, "Fuzzing".

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("corpus entry").path();
        let data = std::fs::read(&path).expect("corpus file");
        let caught = std::panic::catch_unwind(|| run(&data));
        assert!(caught.is_ok(), "{target}: {} fails", path.display());
        n += 1;
    }
    assert!(n > 0, "the corpus of {target} is empty");
}

#[test]
fn chat_body_rewrite_corpus_replays_without_a_failure() {
    replay("chat_body", gatehouse::fuzzing::chat_body);
}

#[test]
fn manifest_parser_corpus_replays_without_a_failure() {
    replay("manifest", gatehouse::fuzzing::manifest);
}

#[test]
fn sse_parser_and_relay_corpus_replays_without_a_failure() {
    replay("sse", gatehouse::fuzzing::sse);
}

#[test]
fn pii_scanner_corpus_replays_without_a_failure() {
    replay("pii", gatehouse::fuzzing::pii);
}

#[test]
fn id_parsers_corpus_replays_without_a_failure() {
    replay("ids", gatehouse::fuzzing::ids);
}

#[test]
fn responses_corpus_replays_without_a_failure() {
    replay("responses", gatehouse::fuzzing::responses);
}

#[test]
fn agui_run_input_corpus_replays_without_a_failure() {
    replay("agui_input", gatehouse::fuzzing::agui_input);
}
