//! True and false cases for every detector.

use std::sync::OnceLock;

use gatehouse_pii::{redact, Counts, Kind, Scanner};

fn scanner() -> &'static Scanner {
    static S: OnceLock<Scanner> = OnceLock::new();
    S.get_or_init(|| Scanner::new(&[]).expect("default scanner builds"))
}

/// (kind, matched text) of every finding.
fn found(text: &str) -> Vec<(Kind, String)> {
    found_with(scanner(), text)
}

fn found_with(scanner: &Scanner, text: &str) -> Vec<(Kind, String)> {
    scanner
        .scan(text)
        .into_iter()
        .map(|f| (f.kind, text[f.start..f.end].to_string()))
        .collect()
}

fn assert_one(text: &str, kind: Kind, value: &str) {
    assert_eq!(
        found(text),
        vec![(kind, value.to_string())],
        "expected exactly one {kind:?} {value:?} in {text:?}"
    );
}

fn assert_none(text: &str) {
    assert_eq!(found(text), vec![], "expected no finding in {text:?}");
}

fn assert_no_kind(text: &str, kind: Kind) {
    let f = found(text);
    assert!(
        f.iter().all(|(k, _)| *k != kind),
        "expected no {kind:?} in {text:?}, got {f:?}"
    );
}

// --------------------------------------------------------------------------
// e-mail

#[test]
fn email_plain_address_is_found() {
    assert_one(
        "write to john.doe@example.com today",
        Kind::Email,
        "john.doe@example.com",
    );
}

#[test]
fn email_with_plus_subdomain_and_trailing_period_is_found_without_the_period() {
    assert_one(
        "Mail: jane+news@mail.example.co.uk.",
        Kind::Email,
        "jane+news@mail.example.co.uk",
    );
}

#[test]
fn email_after_json_escaped_newline_excludes_the_escape_letter() {
    assert_one(
        r#"{"text":"hi\njohn@example.com"}"#,
        Kind::Email,
        "john@example.com",
    );
}

#[test]
fn email_like_strings_without_domain_or_tld_are_not_found() {
    assert_none("the @ sign, user@localhost, @decorator and a@b.c");
    assert_none("git clone git@github.com:org/repo.git");
    assert_one(
        "mail me at git@example.com: thanks",
        Kind::Email,
        "git@example.com",
    );
}

// --------------------------------------------------------------------------
// phones

#[test]
fn phone_us_parenthesized_area_code_is_found() {
    assert_one("Call (555) 123-4567 now", Kind::Phone, "(555) 123-4567");
}

#[test]
fn phone_us_dashed_and_dotted_and_spaced_are_found() {
    assert_one("call 555-123-4567.", Kind::Phone, "555-123-4567");
    assert_one("call 555.123.4567", Kind::Phone, "555.123.4567");
    assert_one("call 555 123 4567", Kind::Phone, "555 123 4567");
    assert_one("call 1-800-555-1234", Kind::Phone, "1-800-555-1234");
}

#[test]
fn phone_uk_london_number_is_found() {
    assert_one("office 020 7946 0958", Kind::Phone, "020 7946 0958");
}

#[test]
fn phone_french_pairs_are_found() {
    assert_one("portable: 06 12 34 56 78", Kind::Phone, "06 12 34 56 78");
}

#[test]
fn phone_german_area_code_forms_are_found() {
    assert_one("Tel. 030 1234567", Kind::Phone, "030 1234567");
    assert_one("Tel. 030/1234567", Kind::Phone, "030/1234567");
}

#[test]
fn phone_international_forms_are_found() {
    assert_one(
        "ring +44 20 7946 0958 please",
        Kind::Phone,
        "+44 20 7946 0958",
    );
    assert_one("ring +1 (555) 123-4567", Kind::Phone, "+1 (555) 123-4567");
    assert_one("ring +33 6 12 34 56 78", Kind::Phone, "+33 6 12 34 56 78");
    assert_one(
        "ring +44 (0)20 7946 0958",
        Kind::Phone,
        "+44 (0)20 7946 0958",
    );
    assert_one("ring +4930123456", Kind::Phone, "+4930123456");
    assert_one("ring +1-555-123-4567", Kind::Phone, "+1-555-123-4567");
}

#[test]
fn phone_followed_by_another_number_is_found_without_it() {
    assert_one(
        "ring +44 20 7946 0958 2024 edition",
        Kind::Phone,
        "+44 20 7946 0958",
    );
    assert_one("Tel 030 1234567 2024 neu", Kind::Phone, "030 1234567");
}

#[test]
fn phone_not_found_in_years_prices_versions_dates_and_short_numbers() {
    assert_none("In 2024 the price was $1,299.99 (was $1,499.00), up 12.5% since 1999.");
    assert_none("Upgrade to version 1.2.3 or 10.15.7 and build 4.5.6-beta");
    assert_none("Due 2024-01-15, shipped 15.01.2024, paid 01/15/2024 at 12:30:45");
    assert_none("Room 101, 42 items, call 911, code 12345");
    assert_none("Order 123456789 and invoice 0123456789 are ready");
}

#[test]
fn phone_not_found_inside_alphanumeric_words() {
    assert_none("id abc555-123-4567 and 555-123-4567xyz");
    assert_none("ref A020 7946 0958");
}

#[test]
fn phone_not_found_in_decimal_lists() {
    assert_none("deltas +12.5 34.2 56.1 7.3");
    assert_none("scores 10 20 30 40 50 60");
}

// --------------------------------------------------------------------------
// payment cards

#[test]
fn card_valid_luhn_grouped_with_spaces_is_found() {
    assert_one(
        "card 4111 1111 1111 1111 exp",
        Kind::Card,
        "4111 1111 1111 1111",
    );
}

#[test]
fn card_valid_luhn_with_dashes_and_ungrouped_are_found() {
    assert_one(
        "card 5555-5555-5555-4444.",
        Kind::Card,
        "5555-5555-5555-4444",
    );
    assert_one("card 4012888888881881", Kind::Card, "4012888888881881");
    assert_one("amex 3782 822463 10005", Kind::Card, "3782 822463 10005");
}

#[test]
fn card_failing_luhn_is_left_alone() {
    assert_none("card 4111 1111 1111 1112 exp");
    assert_none("card 4012888888881882");
}

#[test]
fn card_followed_by_cvv_is_found_without_the_cvv() {
    assert_one("4111 1111 1111 1111 123", Kind::Card, "4111 1111 1111 1111");
}

#[test]
fn card_not_found_in_timestamps_or_mixed_separators() {
    assert_none("ts 1700000000000 and 1712345678901");
    assert_none("4111-1111 1111-1111");
}

// --------------------------------------------------------------------------
// IBAN

#[test]
fn iban_grouped_valid_is_found() {
    assert_one(
        "IBAN: GB82 WEST 1234 5698 7654 32 thanks",
        Kind::Iban,
        "GB82 WEST 1234 5698 7654 32",
    );
}

#[test]
fn iban_compact_and_lowercase_valid_are_found() {
    assert_one(
        "pay DE89370400440532013000.",
        Kind::Iban,
        "DE89370400440532013000",
    );
    assert_one(
        "pay gb82west12345698765432",
        Kind::Iban,
        "gb82west12345698765432",
    );
}

#[test]
fn iban_grouped_followed_by_a_four_letter_word_is_found_without_it() {
    assert_one(
        "send to BE68 5390 0754 7034 from now on",
        Kind::Iban,
        "BE68 5390 0754 7034",
    );
}

#[test]
fn iban_with_one_digit_changed_is_left_alone() {
    assert_none("IBAN: GB82 WEST 1234 5698 7654 33");
    assert_none("IBAN: DE89370400440532013001");
}

// --------------------------------------------------------------------------
// SSN

#[test]
fn ssn_valid_with_dashes_and_spaces_is_found() {
    assert_one("SSN 078-05-1120.", Kind::Ssn, "078-05-1120");
    assert_one("SSN 123 45 6789", Kind::Ssn, "123 45 6789");
}

#[test]
fn ssn_invalid_area_group_or_serial_is_left_alone() {
    for bad in [
        "000-12-3456",
        "666-12-3456",
        "900-12-3456",
        "999-12-3456",
        "123-00-4567",
        "123-45-0000",
    ] {
        assert_none(&format!("SSN {bad} here"));
    }
}

#[test]
fn ssn_with_mixed_separators_or_inside_longer_numbers_is_left_alone() {
    assert_none("SSN 078-05 1120");
    assert_no_kind("ref 1078-05-1120 and 078-05-11201", Kind::Ssn);
}

// --------------------------------------------------------------------------
// IP addresses

#[test]
fn ipv4_address_is_found() {
    assert_one("server at 192.168.1.20:8080", Kind::Ip, "192.168.1.20");
    assert_one("route 10.0.0.0/8", Kind::Ip, "10.0.0.0");
}

#[test]
fn ip_loopback_unspecified_and_broadcast_addresses_are_left_alone() {
    assert_none("listen on 127.0.0.1:8080, 0.0.0.0, ::1, :: and 255.255.255.255");
}

#[test]
fn ipv4_with_octet_over_255_is_left_alone() {
    assert_none("bad 256.1.1.1 and 1.2.3.999");
}

#[test]
fn ipv4_not_found_in_longer_dotted_numbers_or_versions() {
    assert_none("release 1.2.3.4.5 and v1.2.3.4 and version 2.0.0.1");
}

#[test]
fn ipv6_full_and_compressed_forms_are_found() {
    assert_one(
        "addr 2001:0db8:85a3:0000:0000:8a2e:0370:7334 ok",
        Kind::Ip,
        "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
    );
    assert_one(
        "addr fe80::1ff:fe23:4567:890a.",
        Kind::Ip,
        "fe80::1ff:fe23:4567:890a",
    );
    assert_one("addr 2001:db8::1, ok", Kind::Ip, "2001:db8::1");
    assert_one("peer ::2 here", Kind::Ip, "::2");
    assert_one(
        "mapped ::ffff:192.0.2.128 here",
        Kind::Ip,
        "::ffff:192.0.2.128",
    );
    assert_one("url http://[2001:db8::7]:80/", Kind::Ip, "2001:db8::7");
}

#[test]
fn ipv6_not_found_in_rust_and_cpp_paths() {
    assert_none("use std::io; foo::bar(); a::b; std::vector<int>::iterator; crate::A::B");
    assert_none("let x = i32::MAX + u8::MIN;");
}

#[test]
fn ipv6_not_found_in_times_or_mac_addresses() {
    assert_none("at 12:30:45 the MAC 00:1A:2B:3C:4D:5E");
}

// --------------------------------------------------------------------------
// secrets

#[test]
fn secret_aws_access_key_id_is_found() {
    assert_one(
        "key AKIAIOSFODNN7EXAMPLE used",
        Kind::Secret,
        "AKIAIOSFODNN7EXAMPLE",
    );
    assert_one(
        "key ASIAIOSFODNN7EXAMPLE",
        Kind::Secret,
        "ASIAIOSFODNN7EXAMPLE",
    );
    assert_none("key AKIAIOSFODNN7EXAMPL short and XAKIAIOSFODNN7EXAMPLE");
}

#[test]
fn secret_aws_secret_key_value_is_found_only_when_labelled() {
    let v = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    assert_one(&format!("aws_secret_access_key = {v}"), Kind::Secret, v);
    assert_one(&format!("AWS_SECRET_ACCESS_KEY={v}\n"), Kind::Secret, v);
    assert_one(
        &format!(r#"{{"aws_secret_access_key": "{v}"}}"#),
        Kind::Secret,
        v,
    );
    assert_none(&format!("random {v} text"));
}

#[test]
fn secret_github_tokens_are_found() {
    let t = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
    assert_one(&format!("token {t} ok"), Kind::Secret, t);
    for prefix in ["gho", "ghu", "ghs", "ghr"] {
        let t = format!("{prefix}_16C7e42F292c6912E7710c838347Ae178B4a");
        assert_one(&format!("token {t}"), Kind::Secret, &t);
    }
    let t =
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRST";
    assert_one(&format!("token {t}"), Kind::Secret, t);
    assert_none("ghp_short and ghx_16C7e42F292c6912E7710c838347Ae178B4a");
}

#[test]
fn secret_gitlab_slack_google_stripe_are_found() {
    let t = "glpat-xYz12AbC34dEf56GhI78j";
    assert_one(&format!("gl {t}"), Kind::Secret, t);
    let t = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx";
    assert_one(&format!("slack {t}"), Kind::Secret, t);
    let t = "xoxp-123456789012-123456789012-123456789012-abcdef0123456789abcdef0123456789";
    assert_one(&format!("slack {t}"), Kind::Secret, t);
    let t = "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q";
    assert_one(&format!("google {t}"), Kind::Secret, t);
    let t = "sk_live_4eC39HqLyjWDarjtT1zdp7dc";
    assert_one(&format!("stripe {t}"), Kind::Secret, t);
    let t = "rk_live_4eC39HqLyjWDarjtT1zdp7dc";
    assert_one(&format!("stripe {t}"), Kind::Secret, t);
    assert_none("stripe sk_test_4eC39HqLyjWDarjtT1zdp7dc is a test key; xoxb-not-a-token-at-all");
}

#[test]
fn secret_openai_style_keys_are_found_but_not_prose_with_sk_prefix() {
    let t = "sk-proj-Ab3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5oQ7s";
    assert_one(&format!("OPENAI_API_KEY={t}"), Kind::Secret, t);
    let t = "sk-T3BlbkFJa1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6q7r8";
    assert_one(&format!("key: {t}"), Kind::Secret, t);
    assert_none("we use sk-learn-and-scipy-for-everything and task-sk-abcdefghijklmnopqrstuvwxyz");
}

#[test]
fn secret_jwt_is_found() {
    let t = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    assert_one(&format!("jwt {t} end"), Kind::Secret, t);
    assert_none("eyJ alone, eyJhbGc.notjwt.x");
}

#[test]
fn secret_bearer_token_part_is_the_finding() {
    assert_one(
        "Authorization: Bearer abcDEF123456ghiJKL789.x-_~+/ rest",
        Kind::Secret,
        "abcDEF123456ghiJKL789.x-_~+/",
    );
    assert_none("Authorization: Bearer short12345");
    assert_none("the bearer authentication-mechanism");
}

#[test]
fn secret_private_key_block_with_real_newlines_is_found_through_end_line() {
    let key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq\nZm9vYmFy+/==\n-----END RSA PRIVATE KEY-----";
    assert_one(&format!("key:\n{key}\nthanks"), Kind::Secret, key);
}

#[test]
fn secret_private_key_block_with_json_escaped_newlines_is_found() {
    let key = r"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASC==\n-----END PRIVATE KEY-----";
    let json = format!(r#"{{"pem":"{key}","x":1}}"#);
    assert_one(&json, Kind::Secret, key);
}

#[test]
fn secret_truncated_private_key_block_is_found_up_to_the_body_end() {
    let line = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtz";
    let key = format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{line}\n{line}\nAAAABG5vbmU=");
    assert_one(&format!("{key}\n\nThat is all."), Kind::Secret, &key);
    assert_one(&format!("{key}\nThat is all."), Kind::Secret, &key);
    let escaped = key.replace('\n', "\\n");
    assert_one(
        &format!(r#"{{"k":"{escaped}\nbye"}}"#),
        Kind::Secret,
        &escaped,
    );
}

// --------------------------------------------------------------------------
// terms

fn term_scanner() -> Scanner {
    Scanner::new(&[
        "Acme".to_string(),
        "  Project Falcon ".to_string(),
        "   ".to_string(),
        String::new(),
        "Müller GmbH".to_string(),
    ])
    .expect("term scanner builds")
}

#[test]
fn term_matches_case_insensitively_as_whole_word() {
    let s = term_scanner();
    assert_eq!(
        found_with(&s, "ACME corp and acme, not Acmeville or MegaAcme"),
        vec![(Kind::Term, "ACME".into()), (Kind::Term, "acme".into())]
    );
}

#[test]
fn term_phrase_matches_with_any_whitespace_between_words() {
    let s = term_scanner();
    assert_eq!(
        found_with(
            &s,
            "about project  falcon and PROJECT\nFALCON; not project falconry"
        ),
        vec![
            (Kind::Term, "project  falcon".into()),
            (Kind::Term, "PROJECT\nFALCON".into())
        ]
    );
}

#[test]
fn term_with_non_ascii_letters_matches_case_insensitively() {
    let s = term_scanner();
    assert_eq!(
        found_with(&s, "Vertrag mit MÜLLER GMBH."),
        vec![(Kind::Term, "MÜLLER GMBH".into())]
    );
}

#[test]
fn term_list_of_only_blank_terms_builds_a_default_scanner() {
    let s = Scanner::new(&["".into(), "  \t ".into()]).expect("builds");
    assert_eq!(
        found_with(&s, "Acme mail a@example.com"),
        vec![(Kind::Email, "a@example.com".into())]
    );
}

#[test]
fn term_with_regex_metacharacters_is_matched_literally() {
    let s = Scanner::new(&["C++ (beta)".into(), "a.b".into()]).expect("builds");
    assert_eq!(
        found_with(&s, "we ship C++ (beta) and a.b, not axb"),
        vec![
            (Kind::Term, "C++ (beta)".into()),
            (Kind::Term, "a.b".into())
        ]
    );
}

// --------------------------------------------------------------------------
// redact, several kinds together

#[test]
fn redact_replaces_each_finding_with_its_placeholder_and_counts_kinds() {
    let s = Scanner::new(&["Acme".into()]).expect("builds");
    let mut counts = Counts::default();
    let out = redact(
        &s,
        "Hi, I'm at Acme. Mail john@example.com or jane@example.org, call (555) 123-4567, \
         card 4111 1111 1111 1111, IBAN DE89370400440532013000, SSN 078-05-1120, \
         host 10.1.2.3, key AKIAIOSFODNN7EXAMPLE.",
        &mut counts,
    );
    assert_eq!(
        out,
        "Hi, I'm at [TERM]. Mail [EMAIL] or [EMAIL], call [PHONE], \
         card [CARD], IBAN [IBAN], SSN [SSN], \
         host [IP], key [SECRET]."
    );
    assert_eq!(counts.get(Kind::Email), 2);
    assert_eq!(counts.total(), 9);
    assert_eq!(
        serde_json::to_string(&counts).expect("serializes"),
        r#"{"email":2,"phone":1,"card":1,"iban":1,"ip":1,"ssn":1,"secret":1,"term":1}"#
    );
}

#[test]
fn redact_returns_text_unchanged_when_nothing_is_found() {
    let mut counts = Counts::default();
    let text = "Nothing to see here: version 1.2.3, price $10, year 2024.";
    assert_eq!(redact(scanner(), text, &mut counts), text);
    assert!(counts.is_empty());
}

#[test]
fn scan_findings_are_sorted_non_overlapping_and_on_char_boundaries() {
    let text = "Ünïcödé ✓ john@example.com — 555-123-4567 ✓ 4111 1111 1111 1111 ✓ fe80::1 ✓ AKIAIOSFODNN7EXAMPLE";
    let f = scanner().scan(text);
    assert_eq!(f.len(), 5);
    for w in f.windows(2) {
        assert!(w[0].end <= w[1].start);
    }
    for x in &f {
        assert!(text.is_char_boundary(x.start) && text.is_char_boundary(x.end));
    }
}

#[test]
fn scan_prose_with_code_and_numbers_has_no_findings() {
    assert_none(
        "fn main() { let v: Vec<u8> = Vec::with_capacity(1024); std::process::exit(0); }\n\
         The meeting is at 10:30 on 2024-03-05; budget is $12,500.00 for Q3 (about 15%).\n\
         Run `cargo build --release` with rustc 1.79.0, then open http://localhost:8080/api/v1.\n\
         See RFC 7231 section 6.5.1, ISBN 978-3-16-148410-0, and commit 3f2a9c1d.",
    );
}

#[test]
fn failed_candidate_does_not_hide_an_overlapping_valid_finding() {
    // A card candidate failing Luhn must not hide the phone inside the same
    // run; an IPv4-like 5-part version does not hide the e-mail after it.
    assert_no_kind("call +1 555 123 4567 now", Kind::Card);
    assert_one("call +1 555 123 4567 now", Kind::Phone, "+1 555 123 4567");
    assert_one("v 1.2.3.4.5 x@example.com", Kind::Email, "x@example.com");
}

#[test]
fn numbers_are_found_at_text_start_in_parentheses_after_quotes_and_json_escapes() {
    assert_one("555-123-4567", Kind::Phone, "555-123-4567");
    assert_one("(555-123-4567)", Kind::Phone, "555-123-4567");
    assert_one("((555) 123-4567)", Kind::Phone, "(555) 123-4567");
    assert_one("“555-123-4567”", Kind::Phone, "555-123-4567");
    assert_one(
        r#"{"t":"line\n555-123-4567\tx"}"#,
        Kind::Phone,
        "555-123-4567",
    );
    assert_one(
        r#"{"t":"card\n4111111111111111"}"#,
        Kind::Card,
        "4111111111111111",
    );
    assert_one("[2001:db8::1]", Kind::Ip, "2001:db8::1");
    assert_one("é 10.0.0.1", Kind::Ip, "10.0.0.1");
    assert_none("é10.0.0.1 and x4111111111111111");
}

#[test]
fn scanner_rejects_too_many_or_too_long_terms_with_an_error() {
    use gatehouse_pii::{PiiError, MAX_TERMS, MAX_TERM_LEN};
    let many: Vec<String> = (0..=MAX_TERMS).map(|i| format!("name{i}")).collect();
    assert!(matches!(Scanner::new(&many), Err(PiiError::Terms(_))));
    let long = vec!["x".repeat(MAX_TERM_LEN + 1)];
    assert!(matches!(Scanner::new(&long), Err(PiiError::Terms(_))));
    // Duplicates (case-insensitive, whitespace-normalized) count once.
    let dups: Vec<String> = (0..=MAX_TERMS)
        .map(|i| {
            if i % 2 == 0 {
                "Acme  Corp".into()
            } else {
                "ACME CORP".into()
            }
        })
        .collect();
    assert!(Scanner::new(&dups).is_ok());
}
