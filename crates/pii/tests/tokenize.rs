//! Reversible tokenization, restore and streamed restore.

use std::sync::Arc;

use gatehouse_pii::{Counts, Kind, Mode, PiiError, Scanner, StreamRestorer, Vault, TOKEN_NOTE};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn scanner() -> Scanner {
    Scanner::new(&["Acme".into()]).expect("scanner builds")
}

const CONVERSATION: &str = "Hi, I'm Jo from Acme. Mail jo@example.com or call (555) 123-4567; \
     backup mail ann@example.org, card 4111 1111 1111 1111, jo@example.com again.";

#[test]
fn tokenize_same_value_twice_gets_the_same_token() {
    let mut vault = Vault::new();
    let mut counts = Counts::default();
    let out = vault.tokenize(&scanner(), CONVERSATION, &mut counts);
    assert_eq!(
        out,
        "Hi, I'm Jo from [TERM_1]. Mail [EMAIL_1] or call [PHONE_1]; \
     backup mail [EMAIL_2], card [CARD_1], [EMAIL_1] again."
    );
    assert_eq!(vault.len(), 5);
    assert_eq!(counts.get(Kind::Email), 3);
    assert_eq!(counts.total(), 6);
}

#[test]
fn tokenize_numbering_continues_across_calls() {
    let s = scanner();
    let mut vault = Vault::new();
    let mut counts = Counts::default();
    assert_eq!(
        vault.tokenize(&s, "a@example.com", &mut counts),
        "[EMAIL_1]"
    );
    assert_eq!(
        vault.tokenize(&s, "b@example.com and a@example.com", &mut counts),
        "[EMAIL_2] and [EMAIL_1]"
    );
    assert_eq!(
        vault.tokenize(&s, "c@example.com, 10.0.0.1", &mut counts),
        "[EMAIL_3], [IP_1]"
    );
    assert_eq!(vault.max_token_len(), "[EMAIL_1]".len());
}

#[test]
fn tokenize_without_findings_returns_the_text_and_leaves_the_vault_empty() {
    let mut vault = Vault::new();
    let mut counts = Counts::default();
    assert_eq!(
        vault.tokenize(&scanner(), "hello there", &mut counts),
        "hello there"
    );
    assert!(vault.is_empty());
    assert!(counts.is_empty());
}

#[test]
fn restore_round_trips_tokenized_text() {
    let mut vault = Vault::new();
    let tokenized = vault.tokenize(&scanner(), CONVERSATION, &mut Counts::default());
    assert_eq!(vault.restore(&tokenized), CONVERSATION);
}

#[test]
fn restore_leaves_unknown_bracketed_things_alone() {
    let mut vault = Vault::new();
    vault.tokenize(&scanner(), "a@example.com", &mut Counts::default());
    assert_eq!(
        vault.restore("[EMAIL_2] [EMAIL_1] [[EMAIL_1]] [EMAIL_1 [link](x) [] ["),
        "[EMAIL_2] a@example.com [a@example.com] [EMAIL_1 [link](x) [] ["
    );
}

#[test]
fn restore_json_escapes_quotes_backslashes_and_newlines_in_values() {
    let s = Scanner::new(&["Acme \"Quote\" Co".into()]).expect("builds");
    let mut vault = Vault::new();
    let key = "-----BEGIN PRIVATE KEY-----\nQUJD\\x\n-----END PRIVATE KEY-----";
    let out = vault.tokenize(
        &s,
        &format!("{key} and ACME \"QUOTE\" CO"),
        &mut Counts::default(),
    );
    assert_eq!(out, "[SECRET_1] and [TERM_1]");
    let json = r#"{"pem":"[SECRET_1]","org":"[TERM_1]"}"#;
    let restored = vault.restore_json(json);
    assert_eq!(
        restored,
        r#"{"pem":"-----BEGIN PRIVATE KEY-----\nQUJD\\x\n-----END PRIVATE KEY-----","org":"ACME \"QUOTE\" CO"}"#
    );
    let v: serde_json::Value = serde_json::from_str(&restored).expect("still valid JSON");
    assert_eq!(v["pem"], key);
    assert_eq!(v["org"], "ACME \"QUOTE\" CO");
}

#[test]
fn vault_serde_round_trip_keeps_tokens_and_numbering() {
    let s = scanner();
    let mut vault = Vault::new();
    vault.tokenize(&s, "a@example.com b@example.com", &mut Counts::default());
    let json = serde_json::to_string(&vault).expect("serializes");
    let mut back: Vault = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back.len(), 2);
    assert_eq!(back.restore("[EMAIL_2]"), "b@example.com");
    assert_eq!(
        back.tokenize(&s, "c@example.com a@example.com", &mut Counts::default()),
        "[EMAIL_3] [EMAIL_1]"
    );
}

#[test]
fn vault_debug_shows_only_the_entry_count() {
    let mut vault = Vault::new();
    vault.tokenize(
        &scanner(),
        "secret-person@example.com",
        &mut Counts::default(),
    );
    let dbg = format!("{vault:?}");
    assert_eq!(dbg, "Vault { entries: 1 }");
    let restorer = StreamRestorer::new(Arc::new(vault), false);
    assert!(!format!("{restorer:?}").contains("secret-person"));
}

#[test]
fn mode_parses_from_config_strings() {
    assert_eq!("off".parse::<Mode>().expect("off"), Mode::Off);
    assert_eq!("redact".parse::<Mode>().expect("redact"), Mode::Redact);
    assert_eq!(
        "tokenize_reversible".parse::<Mode>().expect("tokenize"),
        Mode::TokenizeReversible
    );
    assert!(matches!(
        "mask".parse::<Mode>(),
        Err(PiiError::UnknownMode(_))
    ));
    assert_eq!(
        serde_json::to_string(&Mode::TokenizeReversible).expect("serializes"),
        "\"tokenize_reversible\""
    );
}

#[test]
fn kind_labels_names_and_serde_agree() {
    for k in Kind::ALL {
        assert_eq!(k.label().to_lowercase(), k.name());
        assert_eq!(
            serde_json::to_string(&k).expect("serializes"),
            format!("\"{}\"", k.name())
        );
    }
}

#[test]
fn counts_merge_iter_and_serialize_only_non_zero_kinds() {
    let mut a = Counts::default();
    a.add(Kind::Email);
    a.add(Kind::Email);
    let mut b = Counts::default();
    b.add(Kind::Phone);
    a.merge(&b);
    assert_eq!(
        a.iter().collect::<Vec<_>>(),
        vec![(Kind::Email, 2), (Kind::Phone, 1)]
    );
    assert_eq!(
        serde_json::to_string(&a).expect("json"),
        r#"{"email":2,"phone":1}"#
    );
    assert_eq!(
        serde_json::to_string(&Counts::default()).expect("json"),
        "{}"
    );
    let back: Counts = serde_json::from_str(r#"{"email":2,"phone":1}"#).expect("parses");
    assert_eq!(back, a);
}

#[test]
fn token_note_mentions_copying_tokens_verbatim() {
    assert!(TOKEN_NOTE.contains("[EMAIL_1]"));
    assert!(TOKEN_NOTE.contains("exactly"));
}

#[test]
fn scanner_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Scanner>();
    assert_send_sync::<Vault>();
    assert_send_sync::<StreamRestorer>();
}

// --------------------------------------------------------------------------
// StreamRestorer

/// A vault with tokens of different lengths, and a model answer using them
/// (also next to unknown bracketed text and token-like near misses).
fn stream_fixture() -> (Arc<Vault>, String) {
    let s = scanner();
    let mut vault = Vault::new();
    let mut counts = Counts::default();
    let mut input = String::new();
    for i in 0..12 {
        input.push_str(&format!("user{i}@example.com "));
    }
    input.push_str("(555) 123-4567 Acme 4111 1111 1111 1111");
    vault.tokenize(&s, &input, &mut counts);
    assert_eq!(vault.len(), 15);
    let answer = "Sure [EMAIL_1], I wrote to [EMAIL_12] and [EMAIL_1]; [PHONE_1][CARD_1] \
                  [TERM_1]. Unknown: [EMAIL_99] [EMAIL_] [link](http://x) [[EMAIL_13]] \
                  ü [EMAIL_2]ö [EMAIL_1";
    (Arc::new(vault), answer.to_string())
}

fn run_stream(vault: &Arc<Vault>, json: bool, chunks: &[&str]) -> (String, usize) {
    let mut r = StreamRestorer::new(vault.clone(), json);
    let mut out = String::new();
    let mut max_held = 0;
    for c in chunks {
        out.push_str(&r.push(c));
        max_held = max_held.max(r.held_len());
    }
    out.push_str(&r.finish());
    assert_eq!(r.held_len(), 0);
    (out, max_held)
}

#[test]
fn stream_restore_split_at_every_byte_position_equals_full_restore() {
    let (vault, answer) = stream_fixture();
    let expected = vault.restore(&answer);
    assert!(expected.contains("user0@example.com"));
    for cut in 0..=answer.len() {
        if !answer.is_char_boundary(cut) {
            continue;
        }
        let (a, b) = answer.split_at(cut);
        let (out, max_held) = run_stream(&vault, false, &[a, b]);
        assert_eq!(out, expected, "split at {cut}");
        assert!(max_held < vault.max_token_len());
    }
}

#[test]
fn stream_restore_split_at_every_pair_of_positions_equals_full_restore() {
    let (vault, answer) = stream_fixture();
    let expected = vault.restore(&answer);
    let cuts: Vec<usize> = (0..=answer.len())
        .filter(|i| answer.is_char_boundary(*i))
        .collect();
    for (n, &i) in cuts.iter().enumerate() {
        for &j in &cuts[n..] {
            let (out, _) = run_stream(&vault, false, &[&answer[..i], &answer[i..j], &answer[j..]]);
            assert_eq!(out, expected, "split at {i} and {j}");
        }
    }
}

#[test]
fn stream_restore_one_char_per_chunk_equals_full_restore() {
    let (vault, answer) = stream_fixture();
    let chars: Vec<String> = answer.chars().map(String::from).collect();
    let chunks: Vec<&str> = chars.iter().map(String::as_str).collect();
    let (out, max_held) = run_stream(&vault, false, &chunks);
    assert_eq!(out, vault.restore(&answer));
    assert!(max_held < vault.max_token_len());
    let (out, _) = run_stream(&vault, true, &chunks);
    assert_eq!(out, vault.restore_json(&answer));
}

#[test]
fn stream_restore_random_chunkings_with_fixed_seed_equal_full_restore() {
    let (vault, answer) = stream_fixture();
    let expected = vault.restore(&answer);
    let expected_json = vault.restore_json(&answer);
    let mut rng = StdRng::seed_from_u64(0x6a7e_4005e);
    for round in 0..500 {
        let mut chunks = Vec::new();
        let mut at = 0;
        while at < answer.len() {
            let mut next = (at + rng.gen_range(1..=12)).min(answer.len());
            while !answer.is_char_boundary(next) {
                next += 1;
            }
            chunks.push(&answer[at..next]);
            at = next;
        }
        let json = round % 2 == 1;
        let (out, max_held) = run_stream(&vault, json, &chunks);
        assert_eq!(
            &out,
            if json { &expected_json } else { &expected },
            "round {round}"
        );
        assert!(max_held < vault.max_token_len());
    }
}

#[test]
fn stream_restore_json_mode_escapes_values() {
    let vault: Vault = serde_json::from_str(
        r#"{"entries":[{"kind":"term","token":"[TERM_1]","value":"Acme \"Q\"\nLtd"}]}"#,
    )
    .expect("vault parses");
    let (out, _) = run_stream(&Arc::new(vault), true, &["{\"to\":\"[TE", "RM_", "1]\"}"]);
    assert_eq!(out, r#"{"to":"Acme \"Q\"\nLtd"}"#);
}

#[test]
fn stream_text_without_bracket_is_emitted_immediately() {
    let (vault, _) = stream_fixture();
    let mut r = StreamRestorer::new(vault, false);
    assert_eq!(r.push("Hello, how are you? "), "Hello, how are you? ");
    assert_eq!(r.held_len(), 0);
    assert_eq!(r.push("Fine."), "Fine.");
    assert_eq!(r.held_len(), 0);
    assert_eq!(r.finish(), "");
}

#[test]
fn stream_holds_only_a_possible_token_prefix_and_releases_it_when_completed() {
    let (vault, _) = stream_fixture();
    let mut r = StreamRestorer::new(vault, false);
    assert_eq!(r.push("Write to [EM"), "Write to ");
    assert_eq!(r.held_len(), "[EM".len());
    assert_eq!(r.push("AIL_1"), "");
    assert_eq!(r.push("] now"), "user0@example.com now");
    assert_eq!(r.held_len(), 0);
}

#[test]
fn stream_releases_bracket_text_as_soon_as_it_cannot_be_a_token() {
    let (vault, _) = stream_fixture();
    let mut r = StreamRestorer::new(vault, false);
    assert_eq!(r.push("a ["), "a ");
    assert_eq!(r.push("n"), "[n");
    assert_eq!(r.held_len(), 0);
    assert_eq!(r.push("ot a token]"), "ot a token]");
    assert_eq!(r.push(" [EMAIL_9"), " ");
    assert_eq!(r.push("9"), "[EMAIL_99");
    assert_eq!(r.finish(), "");
}

#[test]
fn stream_finish_flushes_an_incomplete_token_prefix_verbatim() {
    let (vault, _) = stream_fixture();
    let mut r = StreamRestorer::new(vault, false);
    assert_eq!(r.push("end [PHONE_"), "end ");
    assert_eq!(r.finish(), "[PHONE_");
}

#[test]
fn stream_with_empty_vault_never_holds_anything() {
    let mut r = StreamRestorer::new(Arc::new(Vault::new()), false);
    assert_eq!(r.push("[EMAIL_"), "[EMAIL_");
    assert_eq!(r.held_len(), 0);
}
