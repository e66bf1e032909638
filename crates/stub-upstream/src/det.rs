//! Deterministic stand-ins for model outputs: embeddings, rerank scores,
//! token counts.

use std::collections::HashSet;

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The embedding the stub returns for `text`: `dims` values, a deterministic
/// function of the text (seeded from its FNV-1a hash), L2-normalised.
/// Identical on every route (`/v1/embeddings`, TEI `/embed`, Cohere `/v2/embed`).
pub fn embedding_for(text: &str, dims: usize) -> Vec<f32> {
    let mut state = fnv1a64(text.as_bytes());
    let raw: Vec<f64> = (0..dims)
        .map(|_| {
            let x = splitmix64(&mut state) >> 11; // 53 bits
            (x as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect();
    let norm = raw.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm == 0.0 {
        return vec![0.0; dims];
    }
    raw.iter().map(|v| (v / norm) as f32).collect()
}

fn lower_words(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
}

/// The relevance score the stub gives `doc` for `query`, in `[0, 1]`:
/// `0.99 * (fraction of the distinct query words, lower-cased, split on
/// non-alphanumerics, that occur in the doc) + 0.01 / (1 + chars in doc)`
/// (the second term breaks ties in favour of shorter documents), rounded to
/// 9 decimals so that it survives a JSON round trip through any parser
/// bit-exactly.
pub fn score_for(query: &str, doc: &str) -> f64 {
    let q: HashSet<String> = lower_words(query).collect();
    let tie = 0.01 / (1.0 + doc.chars().count() as f64);
    let raw = if q.is_empty() {
        tie
    } else {
        let d: HashSet<String> = lower_words(doc).collect();
        let hits = q.iter().filter(|w| d.contains(*w)).count();
        0.99 * (hits as f64 / q.len() as f64) + tie
    };
    (raw * 1e9).round() / 1e9
}

/// Number of whitespace-separated words: the stub's token count.
pub fn words(s: &str) -> u64 {
    s.split_whitespace().count() as u64
}

/// TEI `raw_scores: true`: the logit whose sigmoid is the score.
pub(crate) fn logit(score: f64) -> f64 {
    let s = score.clamp(1e-6, 1.0 - 1e-6);
    (s / (1.0 - s)).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_is_deterministic_normalised_and_text_dependent() {
        let a = embedding_for("hello world", 8);
        assert_eq!(a, embedding_for("hello world", 8));
        assert_eq!(a.len(), 8);
        let norm: f32 = a.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        assert_ne!(a, embedding_for("hello world!", 8));
        assert_eq!(embedding_for("x", 1024).len(), 1024);
        assert!(embedding_for("x", 0).is_empty());
    }

    #[test]
    fn score_counts_query_words_and_breaks_ties_by_length() {
        let full = score_for("Red Fox", "the red fox jumps");
        let half = score_for("red fox", "a red car");
        let none = score_for("red fox", "blue whale");
        assert!(full > half && half > none);
        assert!((0.0..=1.0).contains(&full) && (0.0..=1.0).contains(&none));
        assert!(score_for("fox", "fox") > score_for("fox", "fox fox"));
        assert!(score_for("", "anything") < 0.01);
    }

    #[test]
    fn logit_inverts_sigmoid() {
        let s = 0.75;
        let l = logit(s);
        assert!((1.0 / (1.0 + (-l).exp()) - s).abs() < 1e-12);
    }
}
